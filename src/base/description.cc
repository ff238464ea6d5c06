#include "coremlrt/description.h"

#include <charconv>
#include <sstream>
#include <string_view>

namespace coremlrt {

const char* feature_kind_name(FeatureKind kind) {
  switch (kind) {
    case FeatureKind::MultiArray: return "multiArray";
    case FeatureKind::Image: return "image";
    case FeatureKind::Int64: return "int64";
    case FeatureKind::Double: return "double";
    case FeatureKind::String: return "string";
    case FeatureKind::Dictionary: return "dictionary";
    case FeatureKind::Sequence: return "sequence";
    case FeatureKind::State: return "state";
  }
  return "unknown";
}

std::string FeatureDescription::type_str() const {
  std::ostringstream out;
  switch (kind) {
    case FeatureKind::MultiArray:
    case FeatureKind::State:
      if (kind == FeatureKind::State) out << "state ";
      out << dtype_name(dtype) << " " << (shape.empty() ? std::string("[?]") : shape_str(shape));
      if (!shape_range.empty()) {
        out << " range [";
        for (size_t i = 0; i < shape_range.size(); ++i)
          out << (i ? ", " : "") << shape_range[i].first << ".."
              << (shape_range[i].second < 0 ? std::string("inf") : std::to_string(shape_range[i].second));
        out << "]";
      }
      if (!enumerated_shapes.empty()) {
        out << " one of {";
        for (size_t i = 0; i < enumerated_shapes.size(); ++i) out << (i ? ", " : "") << shape_str(enumerated_shapes[i]);
        out << "}";
      }
      break;
    case FeatureKind::Image:
      out << "image " << color_space << " " << image_width << "x" << image_height;
      break;
    case FeatureKind::Sequence:
      out << "sequence of " << dtype_name(dtype);
      if (!shape_range.empty())
        out << " length " << shape_range[0].first << ".."
            << (shape_range[0].second < 0 ? std::string("inf") : std::to_string(shape_range[0].second));
      break;
    default:
      out << feature_kind_name(kind);
  }
  if (optional && default_value) {
    // The shortest text that reads back as the same double (0.7, not 0.69999999999999996).
    char text[32];
    const auto end = std::to_chars(text, text + sizeof text, *default_value).ptr;
    out << " (optional, default " << std::string_view(text, end - text) << ")";
  } else if (optional) {
    out << " (optional)";
  }
  return out.str();
}

// Here with the rest of description.h, not in the runtime library: format/ (below runtime)
// calls it too.
const FunctionDescription* ModelDescription::find_function(const std::string& name) const {
  for (const auto& f : functions)
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace coremlrt
