// Formats, schemes and tensor quantization. Arrays cross without copies where the layout allows:
// a C-contiguous float32 input is read in place, and a QuantizedTensor's codes, scales and zeros are
// views of its own storage (they keep it alive).
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>


#include "bindings.h"
#include "core/error.h"
#include "formats/codec.h"
#include "quant/error_report.h"
#include "quant/format_catalog.h"
#include "quant/quantized_tensor.h"
#include "quant/rtn.h"
#include "quant/scheme.h"

namespace lowbit::python {
namespace {

using AnyArray = nb::ndarray<nb::ro, nb::device::cpu>;

bool IsCContiguous(const AnyArray& a) {
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expected) return false;
    expected *= static_cast<int64_t>(a.shape(i));
  }
  return true;
}

// A weight as rows x cols fp32. float32 C-contiguous arrays are viewed in place (`storage` stays
// empty); float16 and bfloat16 are widened into `storage`; anything else is an Error.
struct FloatInput {
  std::vector<float> storage;
  std::span<const float> values;
  uint64_t rows = 0, cols = 0;
};

FloatInput ReadFloatInput(const AnyArray& a, const char* what) {
  if (a.ndim() < 1 || a.ndim() > 2)
    Fail("{}: expected a 1-D or 2-D array [rows, cols], got {} dimensions", what, a.ndim());
  if (!IsCContiguous(a))
    Fail("{}: the array is not C-contiguous (a transposed or sliced view); pass numpy.ascontiguousarray(x) or "
         "x.contiguous()",
         what);
  FloatInput in;
  in.rows = a.ndim() == 2 ? a.shape(0) : 1;
  in.cols = a.shape(a.ndim() - 1);
  const size_t n = in.rows * in.cols;
  if (n == 0) Fail("{}: the array is empty", what);
  const nb::dlpack::dtype t = a.dtype();
  const auto* bytes = static_cast<const uint8_t*>(a.data());
  if (t == nb::dtype<float>()) {
    in.values = std::span(reinterpret_cast<const float*>(bytes), n);
    return in;
  }
  const bool f16 = t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float) && t.bits == 16 && t.lanes == 1;
  const bool bf16 = t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat) && t.bits == 16 && t.lanes == 1;
  if (!f16 && !bf16)
    Fail("{}: dtype code {} with {} bits is not supported; give float32, float16 or bfloat16", what, t.code, t.bits);
  in.storage.resize(n);
  const auto* halves = reinterpret_cast<const uint16_t*>(bytes);
  if (f16) Fp16ToFp32Row(halves, n, in.storage.data());
  else Bf16ToFp32Row(halves, n, in.storage.data());
  in.values = in.storage;
  return in;
}

// The stored scales (or float zeros) of a grid as an array of their storage type, viewing `bytes`.
nb::ndarray<nb::numpy> GridArray(std::span<const uint8_t> bytes, uint64_t grid_rows, int bits, bool is_float,
                                 nb::handle owner) {
  const size_t width = static_cast<size_t>(bits) / 8;
  const size_t cols = bytes.size() / width / grid_rows;
  const nb::dlpack::dtype t{static_cast<uint8_t>(is_float ? nb::dlpack::dtype_code::Float : nb::dlpack::dtype_code::UInt),
                            static_cast<uint8_t>(bits), 1};
  const size_t shape[2] = {static_cast<size_t>(grid_rows), cols};
  return nb::ndarray<nb::numpy>(const_cast<uint8_t*>(bytes.data()), 2, shape, owner, nullptr, t);
}

}  // namespace

void BindTensors(nb::module_& m) {
  m.def("_formats_json", [] { return FormatCatalogJson(FormatCatalog()).dump(); });
  m.def("_scheme_text_from_flags", &SchemeTextFromFlags, nb::arg("format"), nb::arg("group") = 0,
        nb::arg("asym") = false);

  nb::class_<QuantScheme>(m, "Scheme", "A quantization scheme, e.g. Scheme('int4:g128') or Scheme('nvfp4').")
      .def("__init__", [](QuantScheme* s, const std::string& text) { new (s) QuantScheme(ParseScheme(text)); },
           nb::arg("text"))
      .def_prop_ro("text", &QuantScheme::ToString, "Canonical spelling, parseable again")
      .def_prop_ro("preset", [](const QuantScheme& s) { return s.preset; })
      .def_prop_ro("format", [](const QuantScheme& s) { return std::string(s.element->name); }, "Element format")
      .def_prop_ro("bits", [](const QuantScheme& s) { return s.element->bits; }, "Bits per code")
      .def_prop_ro("granularity", [](const QuantScheme& s) { return std::string(GranularityKindName(s.granularity.kind)); })
      .def_prop_ro("group", [](const QuantScheme& s) { return s.granularity.group; }, "Group size (group granularity)")
      .def_prop_ro("block", [](const QuantScheme& s) {
        return std::vector<uint32_t>{s.granularity.block_rows, s.granularity.block_cols};
      })
      .def_prop_ro("scale_type", [](const QuantScheme& s) { return std::string(ScaleTypeName(s.scale_type)); })
      .def_prop_ro("zero_type", [](const QuantScheme& s) { return std::string(ZeroTypeName(s.zero_type)); })
      .def_prop_ro("asymmetric", &QuantScheme::asymmetric)
      .def_prop_ro("tensor_scale", [](const QuantScheme& s) { return s.tensor_scale; })
      .def("bits_per_weight", &QuantScheme::BitsPerWeight, nb::arg("rows") = 4096, nb::arg("cols") = 4096,
           "Exact storage cost of a rows x cols weight, scales and zero-points included")
      .def("storage_bytes", &QuantScheme::StorageBytes, nb::arg("rows"), nb::arg("cols"))
      .def("__eq__", [](const QuantScheme& a, const QuantScheme& b) { return a.ToString() == b.ToString(); })
      .def("__hash__", [](const QuantScheme& s) { return nb::hash(nb::str(s.ToString().c_str())); })
      .def("__str__", &QuantScheme::ToString)
      .def("__repr__", [](const QuantScheme& s) { return "Scheme('" + s.ToString() + "')"; });

  nb::class_<QuantizedTensor>(m, "QuantizedTensor",
                              "Packed codes, scales and zero-points of one [rows x cols] tensor (lowbit's one weight "
                              "representation). codes/scales/zeros are views of its storage, not copies.")
      .def_prop_ro("scheme", [](const QuantizedTensor& q) { return q.scheme(); })
      .def_prop_ro("shape", [](const QuantizedTensor& q) { return std::vector<uint64_t>{q.rows(), q.cols()}; })
      .def_prop_ro(
          "codes",
          [](nb::handle self) {
            auto& q = nb::cast<QuantizedTensor&>(self);
            const size_t shape[2] = {static_cast<size_t>(q.rows()), q.row_bytes()};
            return nb::ndarray<nb::numpy, uint8_t>(q.codes().data(), 2, shape, self);
          },
          "uint8 [rows, row_bytes]: each row's codes bit-packed LSB-first")
      .def_prop_ro(
          "scales",
          [](nb::handle self) {
            auto& q = nb::cast<QuantizedTensor&>(self);
            const ScaleType t = q.scheme().scale_type;
            const bool is_float = t == ScaleType::kF32 || t == ScaleType::kF16;
            return GridArray(q.scale_bytes(), q.grid().grid_rows, ScaleBits(t), is_float, self);
          },
          "[grid_rows, grid_cols] stored scales: float32/float16 as such, bf16 as uint16 bits, e8m0/ue4m3 as uint8")
      .def_prop_ro(
          "zeros",
          [](nb::handle self) -> nb::object {
            auto& q = nb::cast<QuantizedTensor&>(self);
            const ZeroType t = q.scheme().zero_type;
            if (t == ZeroType::kNone) return nb::none();
            if (t == ZeroType::kInt) return nb::cast(GridArray(q.zero_bytes(), q.grid().grid_rows, 8, false, self));
            const int bits = t == ZeroType::kF32 ? 32 : 16;
            return nb::cast(GridArray(q.zero_bytes(), q.grid().grid_rows, bits, t != ZeroType::kBF16, self));
          },
          "None when symmetric; integer zero-points bit-packed per grid row (uint8), or float zeros")
      .def_prop_ro("tensor_scale", &QuantizedTensor::tensor_scale)
      .def_prop_ro("bits_per_weight", &QuantizedTensor::bits_per_weight)
      .def_prop_ro("storage_bytes", &QuantizedTensor::storage_bytes)
      .def(
          "scale_values",
          [](const QuantizedTensor& q) {
            const ScaleGrid g = q.grid();
            std::vector<float> v(g.cells());
            for (uint64_t c = 0; c < g.cells(); ++c) v[c] = q.Scale(c);
            return OwnedFloatArray(std::move(v), g.grid_rows, g.grid_cols);
          },
          "The scales decoded to float32 (a new array)")
      .def(
          "dequantize",
          [](const QuantizedTensor& q) {
            std::vector<float> v = WithoutGil([&] { return q.Dequantize(); });
            return OwnedFloatArray(std::move(v), q.rows(), q.cols());
          },
          "float32 [rows, cols] (a new array)")
      .def(
          "error_report",
          [](const QuantizedTensor& q, const AnyArray& original) {
            const FloatInput in = ReadFloatInput(original, "error_report: original");
            if (in.rows != q.rows() || in.cols != q.cols())
              Fail("error_report: the original is {} x {}, the tensor {} x {}", in.rows, in.cols, q.rows(), q.cols());
            const ErrorReport e = WithoutGil([&] { return MeasureError(in.values, q.Dequantize(), in.rows, in.cols); });
            return JsonToPython(ErrorReportJson(e));
          },
          nb::arg("original"), "MSE, SQNR, max |error| and the worst row against the original weights")
      .def("__repr__", [](const QuantizedTensor& q) {
        return "QuantizedTensor(" + q.scheme().ToString() + ", " + std::to_string(q.rows()) + " x " +
               std::to_string(q.cols()) + ")";
      });

  m.def(
      "_input_address",
      [](const AnyArray& array) {
        // Where quantize_tensor reads the weights from: the array's own buffer unless it had to convert.
        return reinterpret_cast<uintptr_t>(ReadFloatInput(array, "array").values.data());
      },
      nb::arg("array"));

  m.def(
      "quantize_tensor",
      [](const AnyArray& array, const QuantScheme& scheme, const std::string& name) {
        const FloatInput in = ReadFloatInput(array, "quantize_tensor");
        return WithoutGil([&] { return QuantizeRtn(in.values, in.rows, in.cols, scheme, name); });
      },
      nb::arg("array"), nb::arg("scheme"), nb::arg("name") = "tensor",
      "Round-to-nearest quantization of a float32/float16/bfloat16 NumPy array or torch CPU tensor ([rows, cols]); "
      "float32 C-contiguous input is read in place");
}

}  // namespace lowbit::python
