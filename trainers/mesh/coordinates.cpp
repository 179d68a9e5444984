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
          "context-parallel ranks: each holds 2 of the 2 x cp chunks of every sequence (ring attention); 2 cp must "
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
  return axes_group(shape, rank, {axis});
}

transport::SubGroup axes_group(const MeshShape& shape, int64_t rank, const std::vector<Axis>& axes) {
  Coordinates c = coordinates_of(shape, rank);
  std::string name;
  for (Axis a : axes) {
    c.at(static_cast<size_t>(a)) = 0;
    if (!name.empty()) name += '-';
    name += axis_name(a);
  }
  // The line's number: its first rank's coordinates on the other axes, as a rank of the
  // mesh without `axes`.
  MeshShape rest = shape;
  Coordinates at = c;
  for (Axis a : axes) {
    if (a == Axis::tp) rest.tp = 1;
    if (a == Axis::cp) rest.cp = 1;
    if (a == Axis::ep) rest.ep = 1;
    if (a == Axis::dp) rest.dp = 1;
    if (a == Axis::pp) rest.pp = 1;
  }
  name += '/';
  name += std::to_string(rank_at(rest, at));
  transport::SubGroup g{name, {}};
  int64_t count = 1;
  for (Axis a : axes) count *= shape[a];
  for (int64_t i = 0; i < count; ++i) {
    Coordinates member = c;
    int64_t rest_of_i = i;
    for (Axis a : axes) {
      member.at(static_cast<size_t>(a)) = rest_of_i % shape[a];
      rest_of_i /= shape[a];
    }
    g.members.push_back(static_cast<int>(rank_at(shape, member)));
  }
  return g;
}

}  // namespace quartet::trainers::mesh
