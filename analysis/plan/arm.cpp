#include "analysis/plan/arm.h"

#include <stdexcept>

namespace quartet::analysis::plan {

int64_t& Mesh::size(const std::string& axis) {
  if (axis == "tp") return tp;
  if (axis == "cp") return cp;
  if (axis == "ep") return ep;
  if (axis == "dp") return dp;
  if (axis == "pp") return pp;
  throw std::invalid_argument("mesh axis " + axis + ": expected tp, cp, ep, dp or pp");
}

int64_t Mesh::size(const std::string& axis) const { return const_cast<Mesh*>(this)->size(axis); }

int64_t Mesh::stride(const std::string& axis) const {
  int64_t s = 1;
  for (const char* a : kMeshAxes) {
    if (axis == a) return s;
    s *= size(a);
  }
  throw std::invalid_argument("mesh axis " + axis + ": expected tp, cp, ep, dp or pp");
}

std::string Mesh::text() const {
  std::string out;
  for (const char* a : {"dp", "pp", "tp", "cp", "ep"})
    if (size(a) > 1) out += (out.empty() ? "" : "×") + std::string(a) + std::to_string(size(a));
  return out.empty() ? "1" : out;
}

}  // namespace quartet::analysis::plan
