#include "io/gguf_writer.h"

#include <cstring>
#include <type_traits>

#include "core/error.h"

namespace lowbit {
namespace {

uint64_t PadTo(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

class Encoder {
 public:
  template <class T>
  void Pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    Raw(&v, sizeof(T));
  }
  void String(std::string_view s) {
    Pod<uint64_t>(s.size());
    Raw(s.data(), s.size());
  }
  void Raw(const void* p, size_t n) {
    const size_t at = bytes.size();
    bytes.resize(at + n);
    if (n) std::memcpy(bytes.data() + at, p, n);
  }
  // One value of an array or a KV, without its type tag.
  template <class T>
  void Value(const T& v) {
    if constexpr (std::is_same_v<T, std::string>) {
      String(v);
    } else if constexpr (std::is_same_v<T, bool>) {
      Pod<uint8_t>(v ? 1 : 0);
    } else {
      Pod(v);
    }
  }
  void Value(const GgufArray& array) {
    Pod(static_cast<uint32_t>(array.element_type()));
    std::visit(
        [&](const auto& values) {
          if constexpr (std::is_same_v<std::decay_t<decltype(values)>, std::monostate>) {
            LOWBIT_CHECK(false);  // nested arrays do not exist in GGUF
          } else {
            Pod<uint64_t>(values.size());
            for (const auto& v : values) Value(static_cast<typename std::decay_t<decltype(values)>::value_type>(v));
          }
        },
        array.values);
  }

  std::vector<std::byte> bytes;
};

}  // namespace

GgufWriter::GgufWriter(std::filesystem::path path, uint32_t alignment)
    : path_(std::move(path)), alignment_(alignment) {
  LOWBIT_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0);
  if (alignment != 32) Set("general.alignment", alignment);
}

void GgufWriter::Set(std::string key, GgufValue value) {
  LOWBIT_CHECK(!out_);
  for (const GgufKeyValue& kv : kvs_) LOWBIT_CHECK(kv.key != key);
  kvs_.push_back({std::move(key), std::move(value)});
}

uint64_t GgufWriter::TensorBytes(uint32_t ggml_type, std::span<const uint64_t> ne) {
  const GgmlTypeInfo* info = FindGgmlType(ggml_type);
  LOWBIT_CHECK(info != nullptr && !ne.empty() && ne[0] % info->block_elems == 0);
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  return n / info->block_elems * info->block_bytes;
}

void GgufWriter::DeclareTensor(std::string name, std::vector<uint64_t> ne) {
  LOWBIT_CHECK(!out_ && name.size() < 64 && !ne.empty() && ne.size() <= 4);
  for (const Declared& t : tensors_) LOWBIT_CHECK(t.name != name);
  tensors_.push_back({std::move(name), std::move(ne)});
}

std::vector<std::byte> GgufWriter::Header() const {
  Encoder e;
  e.Pod<uint32_t>(0x46554747);  // "GGUF"
  e.Pod<uint32_t>(3);
  e.Pod<uint64_t>(tensors_.size());
  e.Pod<uint64_t>(kvs_.size());
  for (const GgufKeyValue& kv : kvs_) {
    e.String(kv.key);
    e.Pod(static_cast<uint32_t>(TypeOf(kv.value)));
    std::visit([&](const auto& v) { e.Value(v); }, kv.value);
  }
  for (const Declared& t : tensors_) {
    e.String(t.name);
    e.Pod<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) e.Pod(d);
    e.Pod(t.type);
    e.Pod(t.offset);
  }
  e.bytes.resize(PadTo(e.bytes.size(), alignment_));
  return std::move(e.bytes);
}

void GgufWriter::Begin() {
  out_ = std::make_unique<AtomicFileWriter>(path_);
  out_->Write(std::vector<std::byte>(Header().size()));  // reserved; its size does not depend on types or offsets
}

void GgufWriter::WriteTensor(std::string_view name, uint32_t ggml_type, std::span<const std::byte> bytes) {
  if (!out_) Begin();
  LOWBIT_CHECK(next_ < tensors_.size());
  Declared& t = tensors_[next_++];
  LOWBIT_CHECK(t.name == name && TensorBytes(ggml_type, t.ne) == bytes.size());
  t.type = ggml_type;
  t.offset = data_bytes_;
  out_->Write(bytes);
  data_bytes_ = PadTo(data_bytes_ + bytes.size(), alignment_);
  out_->Write(std::vector<std::byte>(data_bytes_ - t.offset - bytes.size()));
}

uint64_t GgufWriter::Commit() {
  LOWBIT_CHECK(next_ == tensors_.size());
  if (!out_) Begin();  // no tensors: a metadata-only file (a vocabulary, say)
  const std::vector<std::byte> header = Header();
  out_->WriteAt(0, header);
  out_->Commit();
  return header.size() + data_bytes_;
}

}  // namespace lowbit
