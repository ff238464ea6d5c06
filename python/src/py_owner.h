#pragma once
// The one type through which C++ holds a reference to a Python object (docs/design/architecture.md, law 2).
//
// The engine sees caller memory as a Tensor view plus an opaque owner handle
// (std::shared_ptr<const void>). When that memory belongs to a Python object, the handle
// holds a PyOwner: creating it takes a reference (GIL held), destroying it drops the
// reference with the GIL taken first, from whichever thread lets go last. Once the
// interpreter has begun finalizing, the reference is deliberately leaked instead: taking
// the GIL then can hang or kill a non-main thread, and the process is ending anyway.
#include <Python.h>

#include <atomic>
#include <memory>

namespace coremlrt::python {

class PyOwner {
 public:
  // Requires the GIL.
  explicit PyOwner(PyObject* object) : object_(object) { Py_XINCREF(object_); }
  ~PyOwner() {
    if (!object_ || !Py_IsInitialized() || interpreter_finalizing()) return;
    PyGILState_STATE state = PyGILState_Ensure();
    Py_DECREF(object_);
    PyGILState_Release(state);
  }
  PyOwner(const PyOwner&) = delete;
  PyOwner& operator=(const PyOwner&) = delete;

  // An owner handle for the engine that keeps `object` alive. Requires the GIL.
  static std::shared_ptr<const void> share(PyObject* object) { return std::make_shared<PyOwner>(object); }

 static bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return exiting().load() || Py_IsFinalizing();
#else
    return exiting().load() || _Py_IsFinalizing();
#endif
  }

  // Set by the module's atexit hook (mark_exiting), before the interpreter starts finalizing:
  // from then on no thread of ours asks for the GIL again.
  static std::atomic<bool>& exiting() {
    static std::atomic<bool> flag{false};
    return flag;
  }

 private:
  PyObject* object_;
};

}  // namespace coremlrt::python
