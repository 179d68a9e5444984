#include "experiments/results.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "trainers/records.h"

namespace quartet::experiments {

using nlohmann::json;

void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(tmp.string() + ": cannot create: " + std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error(tmp.string() + ": write failed: " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error(tmp.string() + ": cannot flush to disk");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(path.string() + ": cannot replace: " + std::strerror(err));
  }
}

void write_json_atomically(const std::filesystem::path& path, const json& j) {
  write_file_atomically(path, j.dump(2) + "\n");
}

std::vector<json> read_jsonl(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open");
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  std::vector<json> out;
  size_t start = 0;
  int64_t line_no = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string::npos) break;  // a torn last line: the writer died mid-record
    ++line_no;
    if (end > start) {
      try {
        out.push_back(json::parse(text.substr(start, end - start)));
      } catch (const json::parse_error& e) {
        throw std::runtime_error(path.string() + ":" + std::to_string(line_no) + ": not a JSON record: " + e.what());
      }
    }
    start = end + 1;
  }
  return out;
}

json summarize_arm(const std::string& arm, const std::string& regime, const std::vector<std::vector<json>>& roles,
                   std::optional<double> target, int64_t train_samples) {
  json s = {{"arm", arm}, {"regime", regime}, {"processes", roles.size()}};
  int64_t samples = 0, steps = 0;
  double wall = 0.0, eval_seconds = 0.0, forward = 0.0, backward = 0.0, optimizer = 0.0, data = 0.0, comm = 0.0;
  int64_t rss_peak = 0, mem_peak = 0, bytes_sent = 0, bytes_received = 0, messages = 0;
  json tag_peaks = json::object();
  json by_role = json::object();
  json evals = json::array();
  for (size_t i = 0; i < roles.size(); ++i) {
    int64_t role_sent = 0, role_received = 0;
    for (const json& line : roles[i]) {
      const trainers::RecordView r = trainers::read_record(line);
      // Memory counts from every record that carries it, whatever its type: federated
      // pools train in client_round records, not step records.
      if (r.rss_peak || r.memory) {
        json& mine = by_role[r.role.empty() ? "process" + std::to_string(i) : r.role];
        if (mine.is_null()) mine = {{"total", 0}, {"rss", 0}};
        if (r.rss_peak) {
          rss_peak = std::max(rss_peak, *r.rss_peak);
          mine["rss"] = std::max(mine["rss"].get<int64_t>(), *r.rss_peak);
        }
        if (r.memory)
          for (const auto& [tag, m] : *r.memory) {
            if (tag == "total") {
              mem_peak = std::max(mem_peak, m.peak);
              mine["total"] = std::max(mine["total"].get<int64_t>(), m.peak);
            } else {
              tag_peaks[tag] = std::max(tag_peaks.value(tag, int64_t{0}), m.peak);
            }
          }
      }
      if (!r.is_step()) continue;
      samples = std::max(samples, r.samples);
      steps = std::max(steps, r.step);
      wall = std::max(wall, r.wall);
      forward += r.forward;
      backward += r.backward;
      optimizer += r.optimizer;
      data += r.data;
      comm += r.comm_exposed;
      role_sent = r.bytes_sent;
      role_received = r.bytes_received;
      messages = std::max(messages, r.messages);
      if (r.eval) {
        eval_seconds += r.eval->seconds;
        evals.push_back(
            {{"step", r.step}, {"samples", r.samples}, {"epoch", r.epoch}, {"wall", r.wall}, {"value", r.eval->value}});
      }
    }
    bytes_sent += role_sent;
    bytes_received += role_received;
  }
  const double train_seconds = std::max(wall - eval_seconds, 1e-9);
  const double epochs = train_samples > 0 ? static_cast<double>(samples) / static_cast<double>(train_samples) : 0.0;
  s["steps"] = steps;
  s["samples"] = samples;
  s["epochs"] = epochs;
  s["wall_seconds"] = wall;
  s["eval_seconds"] = eval_seconds;
  s["train_seconds"] = train_seconds;
  s["samples_per_second"] = samples > 0 ? static_cast<double>(samples) / train_seconds : 0.0;
  s["compute_seconds"] = {{"forward", forward}, {"backward", backward}, {"optimizer", optimizer}, {"data", data}};
  s["comm_exposed_seconds"] = comm;
  s["memory_peak_bytes"] = {{"total", mem_peak}, {"by_tag", tag_peaks}, {"rss", rss_peak}, {"by_role", by_role}};
  s["bytes"] = {{"sent", bytes_sent},
                {"received", bytes_received},
                {"messages", messages},
                {"per_process_per_epoch",
                 epochs > 0 && !roles.empty()
                     ? static_cast<double>(bytes_sent + bytes_received) / static_cast<double>(roles.size()) / epochs
                     : 0.0}};
  s["evaluations"] = evals;
  s["final_quality"] = evals.empty() ? json(nullptr) : evals.back()["value"];
  s["target"] = target ? json(*target) : json(nullptr);
  json reached = nullptr;
  if (target) {
    for (const json& e : evals) {
      if (e["value"].get<double>() >= *target) {
        reached = {{"step", e["step"]}, {"samples", e["samples"]}, {"wall_seconds", e["wall"]}, {"epoch", e["epoch"]}};
        if (regime == "federated") reached["rounds"] = e["step"];  // a federated step is a round
        break;
      }
    }
  }
  s["to_target"] = reached;
  return s;
}

namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Whole samples per second, with two decimals below 100 (a 3D volume arm trains a few
// samples a second, and "2" would hide a 13 % difference between 2.00 and 2.27).
std::string rate(double samples_per_second) { return fixed(samples_per_second, samples_per_second < 100 ? 2 : 0); }

std::string mib(int64_t bytes) { return fixed(static_cast<double>(bytes) / (1024.0 * 1024.0), 1); }

std::string duration(double s) {
  if (s < 60) return fixed(s, 1) + " s";
  const int64_t t = static_cast<int64_t>(std::lround(s));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  return buf;
}

// A memory cell: one figure, or with several kinds of process (a role's name without
// its index: server, pool, rank) each kind's largest, as "pool 5.8 · server 95.1".
std::string memory_cell(const json& mem, const std::string& key) {
  std::vector<std::pair<std::string, int64_t>> kinds;
  const json by_role = mem.value("by_role", json::object());
  for (const auto& [role, m] : by_role.items()) {
    std::string kind = role;
    while (!kind.empty() && std::isdigit(static_cast<unsigned char>(kind.back()))) kind.pop_back();
    const int64_t v = m.value(key, int64_t{0});
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == kind; });
    if (it == kinds.end()) kinds.emplace_back(kind, v);
    else it->second = std::max(it->second, v);
  }
  if (kinds.size() < 2) return mib(mem.at(key).get<int64_t>());
  std::string cell;
  for (const auto& [kind, v] : kinds) cell += (cell.empty() ? "" : " · ") + kind + " " + mib(v);
  return cell;
}

}  // namespace

std::string arm_status(bool interrupted, std::string& failure, const json& summary) {
  if (interrupted) return "interrupted";
  if (failure.empty() && summary.value("samples", int64_t{0}) == 0)
    failure = "the arm trained no sample: every step, turn or round it recorded failed (the roles' logs "
              "under roles/ say why)";
  return failure.empty() ? "finished" : "failed";
}

std::string summary_table(const std::string& run_name, const std::vector<json>& arms) {
  std::ostringstream out;
  out << "# " << run_name << "\n\n";
  out << "| arm | regime | status | samples/s | peak tracked MiB | peak RSS MiB | activations MiB | bytes/process/epoch "
         "| train time | final quality | to target |\n";
  out << "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
  for (const json& s : arms) {
    const json& mem = s.at("memory_peak_bytes");
    std::string to_target = "—";
    if (s.contains("to_target") && !s["to_target"].is_null())
    {
      const json& t = s["to_target"];
      to_target = duration(t["wall_seconds"].get<double>()) + ", " + std::to_string(t["samples"].get<int64_t>());
      if (t.contains("rounds")) to_target += ", round " + std::to_string(t["rounds"].get<int64_t>());
    }
    else if (s.contains("target") && !s["target"].is_null())
      to_target = "not reached";
    out << "| " << s.at("arm").get<std::string>() << " | " << s.at("regime").get<std::string>() << " | "
        << s.value("status", "finished") << " | " << rate(s.at("samples_per_second").get<double>()) << " | "
        << memory_cell(mem, "total") << " | " << memory_cell(mem, "rss") << " | "
        << mib(mem.at("by_tag").value("activations", int64_t{0})) << " | "
        << fixed(s.at("bytes").at("per_process_per_epoch").get<double>(), 0) << " | "
        << duration(s.at("train_seconds").get<double>()) << " | "
        << (s.at("final_quality").is_null() ? std::string("—") : fixed(s["final_quality"].get<double>(), 4))
        << " | " << to_target << " |\n";
  }
  out << "\nsamples/s: training samples per second of training time (evaluation excluded). Memory: the engine's "
         "tracked peak (all tags, training only) and the process's peak resident set, the largest process's; "
         "an arm with several kinds of process (federated: server and pools) shows each kind's. Quality: "
         "the workload's test-set metric (accuracy; mean Dice for volumes) at the last evaluation. To target: "
         "time and training samples to the first "
         "evaluation at or above the target (federated: and its round).\n";
  return out.str();
}

}  // namespace quartet::experiments
