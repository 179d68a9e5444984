#include "trainers/mesh/coordinates.h"

namespace quartet::trainers::mesh {

const char* axis_name(Axis axis) {
  switch (axis) {
    case Axis::tp: return "tp";
    case Axis::cp: return "cp";
    case Axis::ep: return "ep";
    case Axis::dp: return "dp";
    case Axis::pp: return "pp";
  }
  return "?";
}

int64_t MeshShape::operator[](Axis axis) const {
  switch (axis) {
    case Axis::tp: return tp;
    case Axis::cp: return cp;
    case Axis::ep: return ep;
    case Axis::dp: return dp;
    case Axis::pp: return pp;
  }
  return 1;
}

std::string MeshShape::str() const {
  std::string out;
  for (Axis a : {Axis::dp, Axis::pp, Axis::ep, Axis::cp, Axis::tp}) {
    if ((*this)[a] == 1) continue;
    out += (out.empty() ? "" : " x ") + std::string(axis_name(a)) + " " + std::to_string((*this)[a]);
  }
  return out.empty() ? "1 rank" : out;
}

const SettingsTable<MeshShape>& MeshShape::table() {
  static const SettingsTable<MeshShape> t = [] {
    SettingsTable<MeshShape> t;
    t.add(&MeshShape::dp, "dp", "data-parallel replicas: each batch / dp of every batch, gradients averaged over them")
        .at_least(1)
        .at_most(1024);
    t.add(&MeshShape::tp, "tp",
          "tensor-parallel ranks: each 1/tp of every block's heads and MLP units; must divide the model's heads")
        .at_least(1)
        .at_most(1024);
    t.add(&MeshShape::pp, "pp", "pipeline stages: consecutive stages of the model on each; at most its stages")
        .at_least(1)
        .at_most(1024);
    t.add(&MeshShape::cp, "cp",
          "context-parallel ranks: each holds 2 of the 2 cp chunks of every sequence (ring attention); 2 cp must "
          "divide the context")
        .at_least(1)
        .at_most(1024);
    t.add(&MeshShape::ep, "ep", "expert-parallel ranks: each experts / ep of every mixture of experts; must divide "
                                "the experts")
        .at_least(1)
        .at_most(1024);
    return t;
  }();
  return t;
}

namespace {

// The step between ranks one apart on `axis`: the product of the axes inside it.
int64_t stride(const MeshShape& shape, Axis axis) {
  int64_t s = 1;
  for (Axis a : kAxisOrder) {
    if (a == axis) break;
    s *= shape[a];
  }
  return s;
}

}  // namespace

// Axis values are their places in kAxisOrder, innermost first.
Coordinates coordinates_of(const MeshShape& shape, int64_t rank) {
  Coordinates c{};
  for (size_t i = 0; i < c.size(); ++i) {
    const int64_t n = shape[static_cast<Axis>(i)];
    c[i] = rank % n;
    rank /= n;
  }
  return c;
}

int64_t rank_at(const MeshShape& shape, const Coordinates& c) {
  int64_t rank = 0;
  for (size_t i = c.size(); i-- > 0;) rank = rank * shape[static_cast<Axis>(i)] + c[i];
  return rank;
}

transport::SubGroup axis_group(const MeshShape& shape, int64_t rank, Axis axis) {
  Coordinates c = coordinates_of(shape, rank);
  c[static_cast<size_t>(axis)] = 0;
  const int64_t first = rank_at(shape, c), step = stride(shape, axis);
  // Lines along the axis are numbered by their first rank with the axis taken out.
  const int64_t line = first % step + first / (step * shape[axis]) * step;
  transport::SubGroup g{std::string(axis_name(axis)) + "/" + std::to_string(line), {}};
  for (int64_t i = 0; i < shape[axis]; ++i) g.members.push_back(static_cast<int>(first + i * step));
  return g;
}

}  // namespace quartet::trainers::mesh
