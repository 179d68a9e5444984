#include "gui/report.h"

#include <QDir>
#include <QString>
#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "experiments/results.h"
#include "gui/chart_render.h"
#include "gui/charts.h"
#include "gui/projection.h"
#include "trainers/records.h"

namespace quartet::gui {

namespace fs = std::filesystem;
using nlohmann::json;
using trainers::integer;
using trainers::member;
using trainers::number;
using trainers::text;

namespace {

struct Table {
  std::vector<std::string> headers;
  std::vector<bool> right;  // right-aligned (numbers)
  std::vector<std::vector<std::string>> rows;
};

std::string escape_md(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

std::string escape_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string to_markdown(const Table& t) {
  std::ostringstream out;
  out << "|";
  for (const auto& h : t.headers) out << " " << escape_md(h) << " |";
  out << "\n|";
  for (size_t i = 0; i < t.headers.size(); ++i) out << (t.right[i] ? " ---: |" : " --- |");
  out << "\n";
  for (const auto& row : t.rows) {
    out << "|";
    for (const auto& cell : row) out << " " << escape_md(cell) << " |";
    out << "\n";
  }
  return out.str();
}

std::string to_html(const Table& t) {
  std::ostringstream out;
  out << "<table>\n<thead><tr>";
  for (size_t i = 0; i < t.headers.size(); ++i)
    out << "<th" << (t.right[i] ? " class=\"num\"" : "") << ">" << escape_html(t.headers[i]) << "</th>";
  out << "</tr></thead>\n<tbody>\n";
  for (const auto& row : t.rows) {
    out << "<tr>";
    for (size_t i = 0; i < row.size(); ++i)
      out << "<td" << (t.right[i] ? " class=\"num\"" : "") << ">" << escape_html(row[i]) << "</td>";
    out << "</tr>\n";
  }
  out << "</tbody>\n</table>\n";
  return out.str();
}

std::string s(const QString& q) { return q.toStdString(); }

std::string fixed(double v, int digits) { return s(QString::number(v, 'f', digits)); }

// Seconds to three significant figures, so a 20 ms epoch and a 20 min epoch both read.
std::string seconds(double v) {
  if (v >= 100.0) return fixed(v, 0);
  if (v >= 10.0) return fixed(v, 1);
  if (v >= 1.0) return fixed(v, 2);
  return s(QString::number(v, 'g', 3));
}

// Tracked peak (key "total") or RSS (key "rss"): one figure, or each kind of process's
// largest when an arm has several (a federated server and its pools).
std::string memory_cell(const ArmResults& arm, const char* key) {
  const json& mem = member(arm.summary, "memory_peak_bytes");
  const json& by_role = member(mem, "by_role");
  std::vector<std::pair<std::string, double>> kinds;
  if (by_role.is_object())
    for (const auto& [role, m] : by_role.items()) {
      const std::string kind = role_kind(role);
      const double v = number(m, key);
      auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == kind; });
      if (it == kinds.end()) kinds.emplace_back(kind, v);
      else it->second = std::max(it->second, v);
    }
  if (kinds.size() >= 2) {
    std::string cell;
    for (const auto& [kind, v] : kinds) cell += (cell.empty() ? "" : " · ") + kind + " " + fixed(v / 1048576.0, 1);
    return cell;
  }
  if (member(mem, key).is_number()) return fixed(number(mem, key) / 1048576.0, 1);
  // A running or failed arm: the records' figures.
  double best = 0.0;
  for (const ProcessMemory& p : process_memory(arm)) {
    double v = 0.0;
    if (std::string(key) == "rss") v = p.rss;
    else
      for (const auto& [tag, bytes] : p.tags) v += bytes;
    best = std::max(best, v);
  }
  return best > 0 ? fixed(best / 1048576.0, 1) : "—";
}

std::string to_target_cell(const ArmResults& arm) {
  const json& t = member(arm.summary, "to_target");
  if (t.is_object()) {
    std::string cell = s(format_seconds(number(t, "wall_seconds"))) + ", " + std::to_string(integer(t, "samples")) +
                       " samples";
    if (member(t, "rounds").is_number()) cell += ", round " + std::to_string(integer(t, "rounds"));
    return cell;
  }
  return number(arm.summary, "target") > 0 ? "not reached" : "—";
}

Table summary_table(const RunResults& run) {
  Table t{{"arm", "regime", "status", "samples/s", "peak tracked MiB", "peak RSS MiB", "bytes/process/epoch",
           "train time", "final quality", "to target"},
          {false, false, false, true, true, true, true, true, true, false},
          {}};
  for (const ArmResults& a : run.arms) {
    const std::vector<EvalPoint> evals = eval_points(a);
    const bool started = !a.roles.empty() || !a.summary.is_null();
    t.rows.push_back({a.name, a.regime, a.status, started ? fixed(samples_per_second(a), 0) : "—",
                      started ? memory_cell(a, "total") : "—", started ? memory_cell(a, "rss") : "—",
                      started ? s(format_bytes(bytes_per_process_per_epoch(a))) : "—",
                      started ? s(format_seconds(train_seconds(a))) : "—",
                      evals.empty() ? "—" : fixed(evals.back().value, 4), to_target_cell(a)});
  }
  return t;
}

Table projection_table(const RunResults& run) {
  Table t{{"arm", "critical path", "compute s/epoch", "bytes/epoch on the path", "messages/epoch",
           "measured s/epoch (link)", "projected s/epoch on that link"},
          {false, false, true, true, true, true, true},
          {}};
  for (const std::string& l : projection_links()) {
    t.headers.push_back("projected: " + l);
    t.right.push_back(true);
  }
  for (const ArmResults& a : run.arms) {
    const ArmProjection p = project_arm(a);
    std::vector<std::string> row{a.name};
    if (!p.unavailable.empty()) {
      row.push_back(p.unavailable);
      row.resize(t.headers.size(), "—");
      t.rows.push_back(row);
      continue;
    }
    row.push_back(p.path_model);
    row.push_back(seconds(p.compute_seconds_per_epoch));
    row.push_back(s(format_bytes(p.bytes_per_epoch)));
    row.push_back(fixed(p.messages_per_epoch, 0));
    row.push_back(seconds(p.measured_seconds_per_epoch) + " (" + p.measured_link + ")");
    row.push_back(p.on_measured_link ? seconds(p.on_measured_link->seconds_per_epoch) : "—");
    for (const LinkEstimate& e : p.links) row.push_back(seconds(e.seconds_per_epoch));
    t.rows.push_back(row);
  }
  return t;
}

std::string environment_line(const RunResults& run) {
  const json& env = run.environment;
  std::ostringstream out;
  out << "CPU " << text(env, "cpu", "?") << ", " << integer(env, "cores") << " cores; " << text(env, "build_type", "?")
      << " build of " << text(env, "quartet_commit", "?") << " (" << text(env, "compiler", "?") << "); "
      << text(env, "os", "?");
  return out.str();
}

std::vector<std::string> problems(const RunResults& run) {
  std::vector<std::string> out = run.warnings;
  for (const ArmResults& a : run.arms)
    if (!a.error.empty()) out.push_back(a.name + " failed: " + a.error);
  return out;
}

std::string chart_caption(ChartKind kind) {
  switch (kind) {
    case ChartKind::throughput: return "Training samples per second of training time (evaluation excluded).";
    case ChartKind::quality_wall:
    case ChartKind::quality_samples:
      return "The workload's test metric at each evaluation; the dashed line is the target.";
    case ChartKind::memory:
      return "The engine's tracked peak per tag during training, for the largest process of each kind; the tags "
             "peak at different moments, so a stack can exceed the tracked total.";
    case ChartKind::communication:
      return "Bytes sent and received per process per epoch-equivalent (Gloo and NCCL: the algorithm's bytes).";
    case ChartKind::cumulative_bytes: return "Bytes moved by the arm since it started, every message counted once.";
    case ChartKind::projection:
      return "Dashed lines: projected from this run's compute, bytes and messages (assumptions below); markers: "
             "measured here, on the link the arm ran on (loopback: unshaped).";
  }
  return {};
}

void write_text(const fs::path& path, const std::string& text, std::vector<fs::path>& written) {
  experiments::write_file_atomically(path, text);
  written.push_back(path);
}

}  // namespace

ReportFormats parse_formats(const std::string& list) {
  ReportFormats f;
  std::stringstream in(list);
  bool any = false;
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(std::remove_if(item.begin(), item.end(), [](unsigned char c) { return std::isspace(c); }), item.end());
    if (item.empty()) continue;
    any = true;
    if (item == "png") f.png = true;
    else if (item == "svg") f.svg = true;
    else if (item == "md") f.md = true;
    else if (item == "html") f.html = true;
    else throw std::invalid_argument("--format: unknown format \"" + item + "\"; known: png, svg, md, html");
  }
  if (!any) throw std::invalid_argument("--format: give one or more of png, svg, md, html");
  if ((f.md || f.html) && !f.png && !f.svg) f.png = true;
  return f;
}

std::string summary_markdown(const RunResults& run) { return to_markdown(summary_table(run)); }

std::string projection_markdown(const RunResults& run) {
  std::ostringstream out;
  out << "Assumptions:\n\n";
  for (const std::string& a : projection_assumptions()) out << "- " << a << "\n";
  out << "\n" << to_markdown(projection_table(run));
  return out.str();
}

std::string report_html(const RunResults& run, const std::string& image_ext) {
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>"
      << escape_html(run.name) << " — Quartet report</title>\n<style>\n"
      << "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}\n"
      << "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}\n"
      << "th,td{border:1px solid #ccc;padding:0.3em 0.6em}th{background:#f3f3f3}.num{text-align:right}\n"
      << "img{max-width:100%;border:1px solid #eee}.problem{color:#a00}figure{margin:1.5em 0}\n"
      << "</style>\n</head>\n<body>\n";
  out << "<h1>" << escape_html(run.name) << "</h1>\n<p>Run folder <code>" << escape_html(run.dir.filename().string())
      << "</code>, status <b>" << escape_html(run.status) << "</b>. " << escape_html(environment_line(run))
      << ".</p>\n";
  for (const std::string& p : problems(run)) out << "<p class=\"problem\">" << escape_html(p) << "</p>\n";
  out << "<h2>Summary (measured)</h2>\n" << to_html(summary_table(run));
  out << "<h2>Charts</h2>\n";
  for (const ChartInfo& c : chart_kinds()) {
    const std::string file = std::string(c.id) + "." + image_ext;
    out << "<figure><img src=\"" << escape_html(file) << "\" alt=\"" << escape_html(c.title) << "\"><figcaption>"
        << escape_html(chart_caption(c.kind)) << "</figcaption></figure>\n";
  }
  out << "<h2>Projection over link profiles</h2>\n<p>Measured figures are this run's; every column headed "
         "<i>projected</i> is computed from them.</p>\n<ul>\n";
  for (const std::string& a : projection_assumptions()) out << "<li>" << escape_html(a) << "</li>\n";
  out << "</ul>\n" << to_html(projection_table(run));
  out << "</body>\n</html>\n";
  return out.str();
}

std::vector<fs::path> write_report(const RunResults& run, const ReportFormats& formats) {
  const fs::path dir = run.dir / "report";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir.string() + ": cannot create: " + ec.message());
  std::vector<fs::path> written;
  for (const ChartInfo& c : chart_kinds()) {
    const fs::path stem = dir / c.id;
    if (formats.png) {
      save_chart_png(make_chart(c.kind, run.arms), QString::fromStdString(stem.string() + ".png"));
      written.push_back(stem.string() + ".png");
    }
    if (formats.svg) {
      save_chart_svg(make_chart(c.kind, run.arms), QString::fromStdString(stem.string() + ".svg"));
      written.push_back(stem.string() + ".svg");
    }
  }
  const std::string image_ext = formats.png ? "png" : "svg";
  if (formats.md) {
    std::ostringstream md;
    md << "# " << run.name << "\n\nRun folder `" << run.dir.filename().string() << "`, status **" << run.status
       << "**. " << environment_line(run) << ".\n\n";
    for (const std::string& p : problems(run)) md << "> " << p << "\n\n";
    md << "## Summary (measured)\n\n" << summary_markdown(run) << "\n## Charts\n\n";
    for (const ChartInfo& c : chart_kinds())
      md << "![" << c.title << "](" << c.id << "." << image_ext << ")\n\n" << chart_caption(c.kind) << "\n\n";
    md << "## Projection over link profiles\n\n" << projection_markdown(run);
    write_text(dir / "report.md", md.str(), written);
  }
  if (formats.html) write_text(dir / "index.html", report_html(run, image_ext), written);
  return written;
}

}  // namespace quartet::gui
