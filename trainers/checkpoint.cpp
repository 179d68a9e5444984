#include "trainers/checkpoint.h"

#include <map>
#include <stdexcept>

#include "engine/safetensors.h"

namespace quartet::trainers {
namespace {
constexpr const char* kModelPrefix = "model/";
constexpr const char* kOptimPrefix = "optimizer/";
}  // namespace

void save_checkpoint(const std::filesystem::path& path, const engine::Module& model,
                     const engine::Optimizer& optimizer, const Position& position) {
  engine::NamedTensors tensors;
  for (auto& [name, t] : model.state_dict()) tensors.emplace_back(kModelPrefix + name, t);
  for (auto& [name, t] : optimizer.state()) tensors.emplace_back(kOptimPrefix + name, t);
  nlohmann::json pos = {{"epochs_done", position.epochs_done}, {"step", position.step},
                        {"samples", position.samples},         {"wall", position.wall},
                        {"records_bytes", position.records_bytes}, {"extra", position.extra}};
  engine::save_safetensors(path.string(), tensors, {{"quartet.position", pos.dump()}, {"format", "pt"}});
}

std::optional<Position> load_checkpoint(const std::filesystem::path& path, engine::Module& model,
                                        engine::Optimizer& optimizer) {
  if (!std::filesystem::exists(path)) return std::nullopt;
  engine::SafetensorsFile file = engine::read_safetensors(path.string());
  engine::NamedTensors weights, state;
  for (auto& [name, t] : file.tensors) {
    if (name.starts_with(kModelPrefix)) weights.emplace_back(name.substr(6), t);
    else if (name.starts_with(kOptimPrefix)) state.emplace_back(name.substr(10), t);
    else throw std::runtime_error(path.string() + ": unexpected tensor \"" + name + "\" in a checkpoint");
  }
  auto it = file.metadata.find("quartet.position");
  if (it == file.metadata.end()) throw std::runtime_error(path.string() + ": not a Quartet checkpoint (no position)");
  try {
    engine::load_state_dict(model, weights);
    optimizer.load_state(state);
  } catch (const std::exception& e) {
    throw std::runtime_error(path.string() + ": checkpoint does not fit this arm: " + e.what());
  }
  const nlohmann::json pos = nlohmann::json::parse(it->second);
  Position p;
  p.epochs_done = pos.at("epochs_done").get<int64_t>();
  p.step = pos.at("step").get<int64_t>();
  p.samples = pos.at("samples").get<int64_t>();
  p.wall = pos.at("wall").get<double>();
  p.records_bytes = pos.at("records_bytes").get<int64_t>();
  p.extra = pos.value("extra", nlohmann::json::object());
  return p;
}

}  // namespace quartet::trainers
