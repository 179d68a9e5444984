#include "analysis/plan/search.h"

#include <algorithm>
#include <stdexcept>

namespace quartet::analysis::plan {

std::vector<Mesh> enumerate_meshes(int64_t devices, const std::vector<std::string>& axes) {
  std::vector<Mesh> out;
  std::function<void(size_t, Mesh, int64_t)> assign = [&](size_t i, Mesh mesh, int64_t left) {
    if (i == axes.size()) {
      out.push_back(mesh);
      return;
    }
    for (int64_t size = 1; size <= left; ++size) {
      if (left % size != 0) continue;
      mesh.size(axes[i]) = size;
      assign(i + 1, mesh, left / size);
    }
  };
  assign(0, Mesh{}, devices);
  return out;
}

std::string regime_for(const PlanArm& arm) {
  const Mesh& m = arm.mesh;
  int axes_used = 0;
  for (const char* a : kMeshAxes) axes_used += m.size(a) > 1;
  if (axes_used > 1) return "";
  if (m.dp > 1) return "data_parallel";
  if (m.tp > 1) return "tensor_parallel";
  if (m.pp > 1) return "pipeline";
  if (m.cp > 1) return "context_parallel";
  if (m.ep > 1) return "expert_parallel";
  return arm.micro_batches > 1 ? "accumulate" : "single";
}

namespace {

// Every micro-batch count, ZeRO stage and checkpointing setting of one mesh; false when
// the mesh does not split the model (nothing of it is predicted then).
bool search_mesh(const ModelShape& model, const PlanArm& base, const ClusterProfile& cluster, const SearchOptions& o,
                 const Mesh& mesh, SearchResult& r) {
  const int64_t per_rank = base.batch / (mesh.dp * mesh.ep);
  const bool sharded = mesh.dp * mesh.cp > 1 && mesh.ep == 1;  // ZeRO is not combined with ep
  for (int64_t micro = 1; micro <= std::min(per_rank, o.max_micro_batches); micro *= 2) {
    if (per_rank % micro != 0) continue;
    for (int64_t zero = 0; zero <= (o.zero && sharded ? 3 : 0); ++zero)
      for (int ckpt = 0; ckpt <= (o.checkpointing ? 1 : 0); ++ckpt) {
        PlanArm a = base;
        a.mesh = mesh;
        a.micro_batches = micro;
        a.zero = zero;
        a.checkpointing = ckpt == 1;
        a.cuts.clear();  // balanced stages
        a.regime = regime_for(a);
        if (a.regime.empty()) a.regime = "mesh";
        if (a.regime == "mesh") a.schedule = "sequential";  // the mesh regime's stages run in turn
        a.name = (mesh.ranks() > 1 ? mesh.text() : micro > 1 ? "accum" : "single") +
                 (micro > 1 ? "-m" + std::to_string(micro) : "") +
                 (zero > 0 ? "-z" + std::to_string(zero) : "") + (a.checkpointing ? "-ckpt" : "");
        Prediction p;
        try {
          p = predict(model, a, cluster);
        } catch (const std::invalid_argument&) {
          return false;
        }
        ++r.tried;
        if (p.fits) r.ranked.push_back({a, p});
        else ++r.too_big;
      }
  }
  return true;
}

}  // namespace

SearchResult search(const ModelShape& model, const PlanArm& base, const ClusterProfile& cluster,
                    const SearchOptions& o) {
  SearchResult r;
  std::vector<std::string> axes = o.axes;
  if (model.gpt && model.gpt->moe && std::find(axes.begin(), axes.end(), "ep") == axes.end()) axes.push_back("ep");
  for (const Mesh& mesh : enumerate_meshes(cluster.devices(), axes))
    if (base.batch % (mesh.dp * mesh.ep) != 0 || !search_mesh(model, base, cluster, o, mesh, r)) ++r.refused;
  std::stable_sort(r.ranked.begin(), r.ranked.end(), [](const Candidate& x, const Candidate& y) {
    return x.prediction.step_seconds < y.prediction.step_seconds;
  });
  return r;
}

}  // namespace quartet::analysis::plan
