// What the binding files share: the registration functions, JSON handed to Python as text (the
// package's __init__ turns it into dicts, so both front ends return the same fields), and the
// callback that reports progress and honours Ctrl-C from inside a long call that released the GIL.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lowbit::python {

namespace nb = nanobind;

void BindTensors(nb::module_& m);
void BindModel(nb::module_& m);
void BindJobs(nb::module_& m);

// Thrown from inside a library call when Python has a pending signal (KeyboardInterrupt); the
// binding turns it back into that Python exception once the call has unwound.
struct Interrupted {};

// A float32 [rows, cols] NumPy array that owns `values` (no copy: the vector moves into its capsule).
nb::ndarray<nb::numpy, float> OwnedFloatArray(std::vector<float>&& values, size_t rows, size_t cols);

// A JSON value as the Python object json.loads gives (dict, list, ...): the library's field lists reach
// Python unchanged.
nb::object JsonToPython(const nlohmann::json& j);

// Called with the GIL released: takes it, calls `progress(done, total, detail)` when it is not None,
// then checks for signals (throws Interrupted). A Python exception from `progress` propagates too.
void ReportProgress(const nb::object& progress, size_t done, size_t total, const std::string& detail);

// Runs `fn` with the GIL released, turning Interrupted into the pending Python exception.
template <class Fn>
auto WithoutGil(Fn&& fn) {
  try {
    nb::gil_scoped_release release;
    return fn();
  } catch (const Interrupted&) {
    throw nb::python_error();
  }
}

}  // namespace lowbit::python
