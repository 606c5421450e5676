// The extension module: lowbit.Error carries the library's message (which names the file and field)
// and, as attributes, the file and field when the thrower knew them apart.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "core/cpu.h"
#include "core/error.h"

namespace lowbit::python {

nb::ndarray<nb::numpy, float> OwnedFloatArray(std::vector<float>&& values, size_t rows, size_t cols) {
  auto* owned = new std::vector<float>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return nb::ndarray<nb::numpy, float>(owned->data(), {rows, cols}, owner);
}

nb::object JsonToPython(const nlohmann::json& j) {
  return nb::module_::import_("json").attr("loads")(j.dump());
}

void ReportProgress(const nb::object& progress, size_t done, size_t total, const std::string& detail) {
  nb::gil_scoped_acquire acquire;
  if (!progress.is_none()) {
    try {
      progress(done, total, detail);
    } catch (nb::python_error& e) {
      e.restore();
      throw Interrupted{};
    }
  }
  if (PyErr_CheckSignals() != 0) throw Interrupted{};
}

}  // namespace lowbit::python

NB_MODULE(_lowbit, m) {
  namespace nb = nanobind;
  using namespace lowbit::python;
  m.doc() = "lowbit: LLM quantization (formats, PTQ, runtime, evaluation) from Python";
  m.attr("__version__") = LOWBIT_VERSION;
  // Lives as long as the process (never destroyed after the interpreter is gone).
  static nb::handle error_type = PyErr_NewExceptionWithDoc(
      "lowbit.Error", "A lowbit error: bad input, with the file and field it concerns.", PyExc_Exception, nullptr);
  m.attr("Error") = error_type;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const lowbit::Error& e) {
      nb::object instance = error_type(e.what());
      instance.attr("file") = e.file().empty() ? nb::none() : nb::cast(e.file());
      instance.attr("field") = e.field().empty() ? nb::none() : nb::cast(e.field());
      PyErr_SetObject(error_type.ptr(), instance.ptr());
    }
  });
  lowbit::CpuLevelCap();  // LOWBIT_CPU, before any kernel dispatches (an unknown value fails the import)
  BindTensors(m);
  BindModel(m);
  BindJobs(m);
}
