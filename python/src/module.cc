// The extension module coremlrt._core: a thin layer over the C++ API.
//
// Rules kept here (docs/design/architecture.md, laws 1-4): a Python object reaches the engine only as a
// Tensor view whose owner handle is a PyOwner (py_owner.h), the one type that holds Python
// references from C++; predict() and loading run with the GIL released; the binding drops
// its input references after taking the GIL back, on the calling thread, so a caller's
// array is freed the moment the caller lets go of it. Output arrays own engine memory
// through a capsule holding a plain C++ Tensor, safe to release on any thread.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "coremlrt/backend_ops.h"
#include "coremlrt/float_formats.h"
#include "coremlrt/model.h"
#include "coremlrt/threads.h"
#include "py_dicts.h"
#include "py_owner.h"

#include <atomic>
#include <chrono>
#include <exception>
#include <optional>
#include <thread>

namespace nb = nanobind;
using namespace coremlrt;

namespace {

DType dtype_from_dlpack(nb::dlpack::dtype dt, const std::string& name) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(dt.code);
  if (code == Code::Float && dt.bits == 32) return DType::Float32;
  if (code == Code::Float && dt.bits == 16) return DType::Float16;
  if (code == Code::Float && dt.bits == 64) return DType::Float64;
  if (code == Code::Int && dt.bits == 32) return DType::Int32;
  if (code == Code::Int && dt.bits == 64) return DType::Int64;
  if (code == Code::Int && dt.bits == 16) return DType::Int16;
  if (code == Code::Int && dt.bits == 8) return DType::Int8;
  if (code == Code::UInt && dt.bits == 8) return DType::UInt8;
  if (code == Code::UInt && dt.bits == 16) return DType::UInt16;
  if (code == Code::Bool) return DType::Bool;
  fail_as(ErrorKind::BadInput, name, " has an array dtype this engine cannot take");
}

nb::dlpack::dtype dlpack_from_dtype(DType dtype) {
  switch (dtype) {
    case DType::Float32: return nb::dtype<float>();
    case DType::Float16: return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case DType::Float64: return nb::dtype<double>();
    case DType::Int32: return nb::dtype<int32_t>();
    case DType::Int64: return nb::dtype<int64_t>();
    case DType::Int16: return nb::dtype<int16_t>();
    case DType::UInt16: return nb::dtype<uint16_t>();
    case DType::Int8: return nb::dtype<int8_t>();
    case DType::UInt8: return nb::dtype<uint8_t>();
    case DType::Bool: return nb::dtype<bool>();
    default: fail_as(ErrorKind::Unsupported, "output dtype ", dtype_name(dtype), " cannot be returned to Python");
  }
}

using Array = nb::ndarray<nb::numpy, nb::c_contig, nb::device::cpu>;

// Hands a tensor to numpy without a copy: the capsule owns a Tensor (and so its storage).
nb::object to_numpy(Tensor tensor) {
  auto* owned = new Tensor(std::move(tensor));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  std::vector<size_t> shape(owned->shape.begin(), owned->shape.end());
  return nb::cast(Array(owned->data, shape.size(), shape.data(), owner, nullptr, dlpack_from_dtype(owned->dtype)));
}

}  // namespace

using coremlrt::python::DictField;
using coremlrt::python::to_dict;
using coremlrt::python::to_python;

COREMLRT_DICT_FIELDS(FeatureDescription, DictField{"name", &FeatureDescription::name},
                     DictField{"short_description", &FeatureDescription::short_description},
                     DictField{"kind", &FeatureDescription::kind}, DictField{"dtype", &FeatureDescription::dtype},
                     DictField{"shape", &FeatureDescription::shape},
                     DictField{"shape_range", &FeatureDescription::shape_range},
                     DictField{"enumerated_shapes", &FeatureDescription::enumerated_shapes},
                     DictField{"optional", &FeatureDescription::optional},
                     DictField{"default_value", &FeatureDescription::default_value},
                     DictField{"image_width", &FeatureDescription::image_width},
                     DictField{"image_height", &FeatureDescription::image_height},
                     DictField{"color_space", &FeatureDescription::color_space},
                     DictField{"type", &FeatureDescription::type_str});
COREMLRT_DICT_FIELDS(FunctionDescription, DictField{"name", &FunctionDescription::name},
                     DictField{"inputs", &FunctionDescription::inputs},
                     DictField{"outputs", &FunctionDescription::outputs},
                     DictField{"states", &FunctionDescription::states},
                     DictField{"predicted_feature_name", &FunctionDescription::predicted_feature_name},
                     DictField{"predicted_probabilities_name", &FunctionDescription::predicted_probabilities_name});
COREMLRT_DICT_FIELDS(ModelMetadata, DictField{"short_description", &ModelMetadata::short_description},
                     DictField{"version", &ModelMetadata::version}, DictField{"author", &ModelMetadata::author},
                     DictField{"license", &ModelMetadata::license},
                     DictField{"user_defined", &ModelMetadata::user_defined});
COREMLRT_DICT_FIELDS(ModelDescription, DictField{"specification_version", &ModelDescription::specification_version},
                     DictField{"model_type", &ModelDescription::model_type},
                     DictField{"model_family", &ModelDescription::model_family},
                     DictField{"multifunction", &ModelDescription::multifunction},
                     DictField{"default_function", &ModelDescription::default_function},
                     DictField{"functions", &ModelDescription::functions},
                     DictField{"metadata", &ModelDescription::metadata});
// Where each op runs (Model::placements()), for `coremlrt info --plan`.
COREMLRT_DICT_FIELDS(Model::OpPlacement, DictField{"op_type", &Model::OpPlacement::op_type},
                     DictField{"op_name", &Model::OpPlacement::op_name},
                     DictField{"output", &Model::OpPlacement::output},
                     DictField{"backend", &Model::OpPlacement::backend},
                     DictField{"reason", &Model::OpPlacement::reason},
                     DictField{"region", &Model::OpPlacement::region});
COREMLRT_DICT_FIELDS(ModelStats, DictField{"contexts_created", &ModelStats::contexts_created},
                     DictField{"contexts_reset", &ModelStats::contexts_reset},
                     DictField{"contexts_idle", &ModelStats::contexts_idle},
                     DictField{"pooled_bytes", &ModelStats::pooled_bytes});
COREMLRT_DICT_FIELDS(UnsupportedOp, DictField{"op_type", &UnsupportedOp::op_type},
                     DictField{"op_name", &UnsupportedOp::op_name}, DictField{"output", &UnsupportedOp::output},
                     DictField{"reason", &UnsupportedOp::reason});
COREMLRT_DICT_FIELDS(FunctionReport, DictField{"name", &FunctionReport::name},
                     DictField{"opset", &FunctionReport::opset}, DictField{"op_counts", &FunctionReport::op_counts},
                     DictField{"unsupported", &FunctionReport::unsupported});
COREMLRT_DICT_FIELDS(ModelReport, DictField{"description", &ModelReport::description},
                     DictField{"weight_bytes", &ModelReport::weight_bytes},
                     DictField{"problem", &ModelReport::problem},
                     DictField{"functions", &ModelReport::functions});
COREMLRT_DICT_FIELDS(StateTraffic, DictField{"bytes_copied", &StateTraffic::bytes_copied},
                     DictField{"bytes_written", &StateTraffic::bytes_written});

// Also used by program_bindings.cc.
nb::dict description_dict(const ModelDescription& desc) { return to_dict(desc); }

namespace {

// Threads between "finished f() without the GIL" and "hold the GIL again" (without_gil).
std::atomic<int> g_reacquiring{0};

// Runs `f` with the GIL released and takes the GIL back in ordinary code, not in a
// destructor. Python 3.11-3.13 end a thread that asks for the GIL after finalization has
// begun with pthread_exit, whose forced unwinding is fatal here: it aborts the process in
// a noexcept frame (an RAII guard's destructor) and crashes nanobind's catch-all handler.
// So a thread never asks for the GIL once the module's atexit hook has run (mark_exiting):
// a daemon thread that finishes a prediction after that parks; the process is ending. The
// hook waits for threads already asking, so none is still waiting when finalization begins.
template <class F>
auto without_gil(F&& f) {
  PyThreadState* state = PyEval_SaveThread();
  std::exception_ptr error;
  std::optional<decltype(f())> result;
  try {
    result.emplace(f());
  } catch (...) {
    error = std::current_exception();
  }
  ++g_reacquiring;  // before the check: mark_exiting sees this thread or this thread sees the flag
  if (python::PyOwner::interpreter_finalizing()) {
    --g_reacquiring;
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  PyEval_RestoreThread(state);
  --g_reacquiring;
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

// The atexit hook (runs with the GIL held, before finalization): from now on threads park
// instead of asking for the GIL; those already asking get it while this waits.
void mark_exiting() {
  python::PyOwner::exiting() = true;
  Py_BEGIN_ALLOW_THREADS
  while (g_reacquiring.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  Py_END_ALLOW_THREADS
}

// A numpy array (already of the right dtype, C-contiguous) as a zero-copy engine view.
// Read-only arrays (np.load with mmap, Arrow or Parquet columns) are taken too: the engine
// never writes a caller's input (docs/design/architecture.md, law 4).
Tensor view_of(nb::handle value, const std::string& name) {
  nb::ndarray<nb::numpy, nb::ro, nb::c_contig, nb::device::cpu> array;
  if (!nb::try_cast(value, array)) fail_as(ErrorKind::BadInput, "'", name, "' is not a C-contiguous numpy array");
  Shape shape;
  for (size_t i = 0; i < array.ndim(); ++i) shape.push_back(static_cast<int64_t>(array.shape(i)));
  // The PyOwner keeps the array alive for as long as any tensor refers to it (the engine
  // lets go before the call returns: law 4).
  return Tensor::view(dtype_from_dlpack(array.dtype(), name), shape, const_cast<void*>(array.data()),
                      python::PyOwner::share(value.ptr()));
}

class PyState {
 public:
  explicit PyState(std::shared_ptr<State> state) : state_(std::move(state)) {}
  // Waits for a prediction using the state to end (include/coremlrt/state.h): without the GIL.
  nb::object read_state(const std::string& name) const {
    Tensor value = without_gil([&] { return state_->read(name); });
    return to_numpy(value);
  }
  void write_state(const std::string& name, nb::handle array) {
    Tensor value = view_of(array, name);
    without_gil([&] {
      state_->write(name, value);
      return 0;
    });
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& d : state_->declarations()) out.push_back(d.name);
    return out;
  }
  State* get() const { return state_.get(); }

 private:
  std::shared_ptr<State> state_;
};

class PyModel {
 public:
  PyModel(const std::string& path, const LoadOptions& options) {
    model_ = without_gil([&] { return Model::load(path, options); });
  }

  nb::list placements() const { return nb::borrow<nb::list>(to_python(model_->placements())); }
  std::string backend() const { return model_->backend(); }

  nb::dict stats() const { return to_dict(model_->stats()); }

  nb::dict description() const { return description_dict(model_->description()); }
  std::string function_name() const { return model_->function().name; }
  size_t weight_bytes() const { return model_->weight_bytes(); }
  // Classifier labels (Model::class_labels()): model.py maps classify's class index and
  // probability vector to coremltools' label and {label: probability} dictionary with them.
  std::vector<std::string> class_labels() const { return model_->class_labels(); }
  // A string, dictionary or sequence input's vocabulary (Model::input_vocabulary()): model.py
  // encodes a str, dict or list with it. (entries, integer_keys, absent_value).
  std::vector<std::string> output_vocabulary(const std::string& name) const { return model_->output_vocabulary(name); }
  nb::tuple input_vocabulary(const std::string& name) const {
    const Model::InputVocabulary& v = model_->input_vocabulary(name);
    return nb::make_tuple(v.entries, v.integer_keys, v.absent_value);
  }

  PyState make_state() const { return PyState(model_->make_state()); }

  // `inputs` maps names to C-contiguous arrays already converted to the model's dtypes.
  nb::dict predict(nb::dict inputs, PyState* state) const {
    NamedTensors tensors;
    for (auto [key, value] : inputs) {
      std::string name = nb::cast<std::string>(key);
      tensors[name] = view_of(value, "input '" + name + "'");
    }
    State* engine_state = state ? state->get() : nullptr;
    NamedTensors outputs = without_gil([&] {
      NamedTensors out = model_->predict(tensors, engine_state);
      // float16 outputs come back as float32, as coremltools returns them (python/coremlrt/model.py),
      // widened here with the vectorized conversion, off the GIL: numpy's astype converts element
      // by element, a visible part of a prediction with large outputs (gpt2_prefill fp16's logits
      // are 6.4 million values; docs/reports/performance.md, "Measurements behind code choices").
      for (auto& [name, tensor] : out)
        if (tensor.dtype == DType::Float16) {
          Tensor wide = Tensor::empty(DType::Float32, tensor.shape);
          half_to_float(tensor.ptr<half>(), wide.ptr<float>(), tensor.numel());
          tensor = std::move(wide);
        }
      return out;
    });
    tensors.clear();  // drops the input references here, on the calling thread, GIL held
    nb::dict result;
    for (auto& [name, tensor] : outputs) result[name.c_str()] = to_numpy(std::move(tensor));
    return result;
  }

 private:
  std::shared_ptr<const Model> model_;
};

nb::dict inspect(const std::string& path) {
  return to_dict(without_gil([&] { return inspect_model(path); }));
}

// coremlrt.Error (a RuntimeError, as it always was) and one subclass of it per ErrorKind
// (coremlrt/error.h), whose class attribute `kind` is the kind's name; the package exports them
// (python/coremlrt/__init__.py). The classes live only as attributes of this module, found by
// name when an error is raised (law 2: no C++ code but PyOwner holds a Python object).
struct ErrorClass {
  ErrorKind kind;
  const char* name;
  const char* doc;
};
constexpr ErrorClass kErrorClasses[] = {  // in ErrorKind's order
    {ErrorKind::BadModel, "BadModelError", "The model's files cannot be read, or contradict themselves or the format."},
    {ErrorKind::Unsupported, "UnsupportedError", "An op, layer, model type or feature this build does not run."},
    {ErrorKind::BadInput, "BadInputError", "What the caller passed: inputs, states, options or names."},
    {ErrorKind::ResourceLimit, "ResourceLimitError", "A memory, size or iteration limit was reached."},
    {ErrorKind::Internal, "InternalError", "A fault of the engine or of a library it calls."},
};

void bind_errors(nb::module_& m) {
  nb::object base = nb::steal(PyErr_NewExceptionWithDoc(
      "coremlrt._core.Error", "An error of the coremlrt engine; its subclasses say what kind it is.", PyExc_RuntimeError,
      nullptr));
  if (!base) throw nb::python_error();
  m.attr("Error") = base;
  for (const ErrorClass& c : kErrorClasses) {
    nb::dict attributes;
    attributes["kind"] = error_kind_name(c.kind);
    nb::object cls = nb::steal(PyErr_NewExceptionWithDoc((std::string("coremlrt._core.") + c.name).c_str(), c.doc,
                                                         base.ptr(), attributes.ptr()));
    if (!cls) throw nb::python_error();
    m.attr(c.name) = cls;
  }
  // Translators run with the GIL held, as the exception reaches Python.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      const char* name = "InternalError";
      for (const ErrorClass& c : kErrorClasses)
        if (c.kind == e.kind()) name = c.name;
      nb::object cls = nb::module_::import_("coremlrt._core").attr(name);
      PyErr_SetString(cls.ptr(), e.what());
    }
  });
}

}  // namespace

void bind_load_options(nb::module_& m);  // load_options_bindings.cc
void bind_structure(nb::module_& m);     // structure_bindings.cc
void bind_program(nb::module_& m);    // program_bindings.cc

NB_MODULE(_core, m) {
  m.doc() = "coremlrt engine binding (use the coremlrt package, not this module)";
  bind_errors(m);
  nb::module_::import_("atexit").attr("register")(nb::cpp_function(&mark_exiting));
  bind_load_options(m);  // before Model, whose constructor takes one
  nb::class_<PyModel>(m, "Model")
      .def(nb::init<const std::string&, const LoadOptions&>(), nb::arg("path"), nb::arg("options") = LoadOptions())
      .def("placements", &PyModel::placements)
      .def_prop_ro("backend", &PyModel::backend)
      .def("stats", &PyModel::stats)
      .def("description", &PyModel::description)
      .def_prop_ro("function_name", &PyModel::function_name)
      .def_prop_ro("weight_bytes", &PyModel::weight_bytes)
      .def_prop_ro("class_labels", &PyModel::class_labels)
      .def("input_vocabulary", &PyModel::input_vocabulary)
      .def("output_vocabulary", &PyModel::output_vocabulary)
      .def("make_state", &PyModel::make_state)
      .def("predict", &PyModel::predict, nb::arg("inputs"), nb::arg("state").none() = nb::none());
  nb::class_<PyState>(m, "State")
      .def("read_state", &PyState::read_state, nb::arg("name"))
      .def("write_state", &PyState::write_state, nb::arg("name"), nb::arg("value"))
      .def_prop_ro("names", &PyState::names);
  m.def("inspect", &inspect, nb::arg("path"));
  m.def("available_backends", &available_backends);
  // {op type: "" where the backend runs such ops, else why it runs none}; {} for "reference".
  m.def("backend_op_support", [](const std::string& backend) { return to_python(backend_op_support(backend)); });
  // The intra-op pool of our own kernels (include/coremlrt/threads.h). Shrinking it joins pool
  // threads, so the GIL is released meanwhile.
  m.def("set_num_threads", &set_num_threads, nb::arg("threads"), nb::call_guard<nb::gil_scoped_release>());
  m.def("num_threads", &num_threads);
  // Bytes of state copied and written by predictions so far (include/coremlrt/state.h).
  m.def("state_traffic", [] { return to_dict(state_traffic()); });
  bind_structure(m);
  bind_program(m);
  // (op_type, min_ios, max_ios, dtypes, family): dtypes is a tuple of numpy-style names, or
  // ("any",) for kernels that move elements of every dtype without reading them; family is the op
  // family of its kernel (src/ops/register.h).
  m.def("supported_ops", [] {
    nb::list out;
    for (const auto& op : supported_ops()) {
      nb::list dtypes;
      if (op.any_dtype) dtypes.append("any");
      for (DType dtype : op.dtypes) dtypes.append(dtype_name(dtype));
      out.append(nb::make_tuple(op.op_type, op.min_ios, op.max_ios, nb::tuple(dtypes), op.family));
    }
    return out;
  });
}
