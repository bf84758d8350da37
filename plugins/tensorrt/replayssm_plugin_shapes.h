/*
 * The inputs of the ReplaySSM TensorRT plugins and the check of their shapes, with no TensorRT
 * types (tests/aot/test_plugin_shapes.py compiles it on its own).
 *
 * The C launchers take one size a dimension (heads from x, dstate from the state, L from the
 * x ring) and derive every tensor's strides from it, so an input whose dims disagree with the
 * others would be read or written past its end. The plugins check them all: at build time
 * (configurePlugin, where a dimension TensorRT does not know yet is -1 and is not compared) and
 * at every shape change before a launch (onShapeChange).
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace replayssm {

enum class Kind { kMamba2Step, kGDNStep, kAdvance, kReset };

/* Plugin parameters (PluginField names); all int32 except scale (float32). */
struct Params {
  int32_t route = 0;       // RS_ROUTE_OUTPUT_ONLY
  int32_t pad_slot_id = -1;
  int32_t has_z = 0;
  int32_t has_force_flush = 0;
  int32_t owns_rings = 0;  // Mamba2: rings and cursors in plugin memory, keyed by slot
  int32_t max_slots = 0;   // owns_rings: slots of the engine's state pool
  int32_t buffer_len = 16; // owns_rings / advance: ring length L
  int32_t flush_all = 0;   // advance: the step's route flushed every row
  int32_t has_reset = 0;   // owns_rings: an input of slots entering decode (their rings are emptied first)
  float scale = 0.f;       // GDN: q scale (0: 1/sqrt(K))
};

/* One input: its name and the size each axis stands for. */
struct InputLayout {
  char const* name;
  std::vector<char const*> axes;
};

/* The inputs in order:
 *   Mamba2: state x dt A B C D dt_bias slot_idx [x_cache dt_cache B_cache write_pos] [z] [force_flush] [new_slots]
 *   GDN:    state q k v a b A_log dt_bias slot_idx d_cache k_cache g_cache write_pos [force_flush]
 *   Advance: write_pos slot_idx [force_flush]
 *   Reset:   write_pos new_slots */
inline std::vector<InputLayout> inputLayouts(Kind kind, Params const& p) {
  std::vector<InputLayout> in;
  if (kind == Kind::kMamba2Step) {
    in = {{"state", {"slots", "heads", "headdim", "dstate"}}, {"x", {"batch", "heads", "headdim"}},
          {"dt", {"batch", "heads"}}, {"A", {"heads"}}, {"B", {"batch", "groups", "dstate"}},
          {"C", {"batch", "groups", "dstate"}}, {"D", {"heads"}}, {"dt_bias", {"heads"}}, {"slot_idx", {"batch"}}};
    if (!p.owns_rings)
      in.insert(in.end(), {{"x_cache", {"slots", "heads", "L", "headdim"}}, {"dt_cache", {"slots", "heads", "L"}},
                           {"B_cache", {"slots", "groups", "L", "dstate"}}, {"write_pos", {"slots"}}});
    if (p.has_z) in.push_back({"z", {"batch", "heads", "headdim"}});
    if (p.has_force_flush) in.push_back({"force_flush", {"batch"}});
    if (p.has_reset) in.push_back({"new_slots", {"batch"}});
  } else if (kind == Kind::kGDNStep) {
    in = {{"state", {"slots", "v_heads", "head_v_dim", "head_k_dim"}}, {"q", {"batch", "k_heads", "head_k_dim"}},
          {"k", {"batch", "k_heads", "head_k_dim"}}, {"v", {"batch", "v_heads", "head_v_dim"}},
          {"a", {"batch", "v_heads"}}, {"b", {"batch", "v_heads"}}, {"A_log", {"v_heads"}},
          {"dt_bias", {"v_heads"}}, {"slot_idx", {"batch"}}, {"d_cache", {"slots", "v_heads", "L", "head_v_dim"}},
          {"k_cache", {"slots", "k_heads", "L", "head_k_dim"}}, {"g_cache", {"slots", "v_heads", "L"}},
          {"write_pos", {"slots"}}};
    if (p.has_force_flush) in.push_back({"force_flush", {"batch"}});
  } else if (kind == Kind::kAdvance) {
    in = {{"write_pos", {"slots"}}, {"slot_idx", {"batch"}}};
    if (p.has_force_flush) in.push_back({"force_flush", {"batch"}});
  } else {
    in = {{"write_pos", {"slots"}}, {"new_slots", {"batch"}}};
  }
  return in;
}

/* A tensor's dims as the plugin sees them (TensorRT's Dims: -1 where not known yet). */
struct Shape {
  int32_t nbDims;
  int64_t const* d;
};

namespace detail {
inline std::string dimsText(Shape const& s) {
  std::string t = "(";
  for (int32_t i = 0; i < s.nbDims; ++i) t += (i ? ", " : "") + std::to_string(s.d[i]);
  return t + (s.nbDims == 1 ? ",)" : ")");
}
inline std::string axesText(InputLayout const& in) {
  std::string t = "(";
  for (size_t i = 0; i < in.axes.size(); ++i) t += std::string(i ? ", " : "") + in.axes[i];
  return t + (in.axes.size() == 1 ? ",)" : ")");
}
}  // namespace detail

/* "" when the shapes agree with each other and the parameters, else what is wrong (the input,
 * its expected axes and the size it disagrees with). */
inline std::string checkShapes(Kind kind, Params const& p, Shape const* shapes, int32_t nbInputs) {
  std::vector<InputLayout> const layouts = inputLayouts(kind, p);
  if (nbInputs != static_cast<int32_t>(layouts.size()))
    return "takes " + std::to_string(layouts.size()) + " inputs with these fields, got " + std::to_string(nbInputs);
  struct Bound {
    char const* axis;
    int64_t size;
    char const* from;
  };
  std::vector<Bound> bound;
  auto find = [&](char const* axis) -> Bound const* {
    for (Bound const& b : bound)
      if (std::string(b.axis) == axis) return &b;
    return nullptr;
  };
  for (int32_t i = 0; i < nbInputs; ++i) {
    InputLayout const& in = layouts[i];
    Shape const& s = shapes[i];
    std::string const what = "input " + std::to_string(i) + " (" + in.name + ") must be " + detail::axesText(in);
    if (s.nbDims != static_cast<int32_t>(in.axes.size())) return what + ", got " + detail::dimsText(s);
    for (int32_t a = 0; a < s.nbDims; ++a) {
      if (s.d[a] < 0) continue;  // not known yet (build time)
      bool const emptyOk = std::string(in.axes[a]) == "batch";
      if (s.d[a] < (emptyOk ? 0 : 1)) return what + ", got " + detail::dimsText(s);
      if (Bound const* b = find(in.axes[a])) {
        if (b->size != s.d[a])
          return what + ", got " + detail::dimsText(s) + ": " + in.axes[a] + " is " + std::to_string(b->size) +
                 " in " + b->from;
      } else {
        bound.push_back({in.axes[a], s.d[a], in.name});
      }
    }
  }
  auto size = [&](char const* axis) -> int64_t {
    Bound const* b = find(axis);
    return b ? b->size : -1;
  };
  auto divides = [&](char const* part, char const* whole) -> std::string {
    int64_t const k = size(part), n = size(whole);
    if (k > 0 && n > 0 && n % k != 0)
      return std::string(part) + " (" + std::to_string(k) + ") must divide " + whole + " (" + std::to_string(n) + ")";
    return "";
  };
  std::string const bad = kind == Kind::kMamba2Step ? divides("groups", "heads")
                          : kind == Kind::kGDNStep  ? divides("k_heads", "v_heads")
                                                    : "";
  if (!bad.empty()) return bad;
  int64_t const L = size("L");
  if (L > 64) return "the rings' L (" + std::to_string(L) + ") must be at most 64";
  if (kind == Kind::kMamba2Step && p.owns_rings && size("slots") > p.max_slots)
    return "the state has " + std::to_string(size("slots")) + " slots, more than the rings' max_slots (" +
           std::to_string(p.max_slots) + ")";
  return "";
}

}  // namespace replayssm
