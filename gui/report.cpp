#include "gui/report.h"

#include <QString>
#include <sstream>
#include <stdexcept>

#include "analysis/pipeline_view.h"
#include "analysis/plan_check.h"
#include "analysis/projection.h"
#include "runner/results.h"
#include "gui/chart_render.h"
#include "gui/charts.h"

namespace quartet::gui {

namespace fs = std::filesystem;
using analysis::arms_table;
using analysis::arms_table_note;
using analysis::environment_line;
using analysis::problems;
using analysis::projection_assumptions;
using analysis::projection_table;
using analysis::RunResults;
using analysis::Table;

namespace {

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

// The projection table as two that fit a page: the arms' measured figures (a row an
// arm), then the time per epoch projected on each link, a row a link and a column an arm.
std::string projection_html(const Table& t) {
  const std::string prefix = "projected: ";
  size_t first_link = t.headers.size();
  for (size_t i = 0; i < t.headers.size(); ++i)
    if (t.headers[i].rfind(prefix, 0) == 0) {
      first_link = i;
      break;
    }
  Table measured{{t.headers.begin(), t.headers.begin() + static_cast<std::ptrdiff_t>(first_link)},
                 {t.right.begin(), t.right.begin() + static_cast<std::ptrdiff_t>(first_link)},
                 {}};
  Table links{{"link: projected s/epoch"}, {false}, {}};
  for (const auto& row : t.rows) {
    measured.rows.emplace_back(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(first_link));
    links.headers.push_back(row.front());
    links.right.push_back(true);
  }
  for (size_t l = first_link; l < t.headers.size(); ++l) {
    std::vector<std::string> row{t.headers[l].substr(prefix.size())};
    for (const auto& arm : t.rows) row.push_back(l < arm.size() ? arm[l] : "—");
    links.rows.push_back(std::move(row));
  }
  return to_html(measured) + to_html(links);
}

std::string chart_caption(ChartKind kind) {
  switch (kind) {
    case ChartKind::throughput: return "Training samples per second of training time (evaluation and first-time kernel measurements excluded).";
    case ChartKind::quality_wall:
    case ChartKind::quality_samples:
      return "The workload's test metric at each evaluation; the dashed line is the target.";
    case ChartKind::loss: return "The training loss of every step (the arm's clock role's), against training samples.";
    case ChartKind::memory:
      return "The engine's tracked memory per tag at the moment each process's tracked total peaked during "
             "training, so a bar's length is that peak; the largest process of each kind. (Runs recorded without "
             "that breakdown show each tag's own peak: those are reached at different moments and may sum to "
             "more.)";
    case ChartKind::communication:
      return "Bytes sent and received per process per epoch-equivalent (Gloo and NCCL: the algorithm's bytes).";
    case ChartKind::cumulative_bytes: return "Bytes moved by the arm since it started, every message counted once.";
    case ChartKind::projection:
      return "Lines: projected from this run's compute, bytes and messages (assumptions below); large markers: "
             "measured here, on the link the arm ran on (loopback: unshaped).";
  }
  return {};
}

void write_text(const fs::path& path, const std::string& text, std::vector<fs::path>& written) {
  runner::write_file_atomically(path, text);
  written.push_back(path);
}

}  // namespace

std::string report_html(const RunResults& run, const std::string& image_ext,
                        const analysis::plan::ClusterProfile* cluster) {
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>"
      << escape_html(run.name) << " — Quartet report</title>\n<style>\n"
      << "body{font-family:system-ui,sans-serif;margin:2em;color:#222}\n"
      << "p,li,figcaption{max-width:60em}\n"
      << "table{border-collapse:collapse;margin:1em 0;font-size:0.9em;display:block;max-width:100%;overflow-x:auto}\n"
      << "th,td{border:1px solid #ccc;padding:0.3em 0.6em}th{background:#f3f3f3}.num{text-align:right}\n"
      << "td:first-child{white-space:nowrap}\n"
      << "img{max-width:100%;border:1px solid #eee}.problem{color:#a00}figure{margin:1.5em 0}\n"
      << "</style>\n</head>\n<body>\n";
  out << "<h1>" << escape_html(run.name) << "</h1>\n<p>Run folder <code>" << escape_html(run.dir.filename().string())
      << "</code>, status <b>" << escape_html(run.status) << "</b>. " << escape_html(environment_line(run))
      << ".</p>\n";
  for (const std::string& p : problems(run)) out << "<p class=\"problem\">" << escape_html(p) << "</p>\n";
  out << "<h2>Summary (measured)</h2>\n" << to_html(arms_table(run.arms)) << "<p>" << escape_html(arms_table_note())
      << "</p>\n";
  if (const analysis::Table privacy = analysis::privacy_table(run.arms); !privacy.rows.empty())
    out << to_html(privacy) << "<p>" << escape_html(analysis::privacy_table_note()) << "</p>\n";
  bool pipeline_heading = false;
  for (const analysis::ArmResults& a : run.arms) {
    const std::vector<analysis::StageFigures> stages = analysis::pipeline_stages(a);
    if (stages.empty()) continue;
    if (!pipeline_heading) out << "<h2>Pipeline stages (measured)</h2>\n";
    pipeline_heading = true;
    out << "<h3>" << escape_html(a.name) << "</h3>\n<p>" << stages.size() << " stages, "
        << stages.front().micro_batches << " micro-batches, " << escape_html(stages.front().schedule)
        << "; balance (busiest / least busy stage's compute) " << analysis::fixed(analysis::stage_balance(stages), 2)
        << ".</p>\n"
        << to_html(analysis::pipeline_table(stages));
    if (!analysis::pipeline_timeline(a).empty())
      out << "<figure><img src=\"" << escape_html(analysis::timeline_file(a)) << "\" alt=\"" << escape_html(a.name)
          << ": one step\"><figcaption>The last step on every stage, on one clock: forwards blue, backwards orange, "
             "the optimizer grey; the gaps are idle.</figcaption></figure>\n";
  }
  if (pipeline_heading) out << "<p>" << escape_html(analysis::pipeline_table_note()) << "</p>\n";
  out << "<h2>Charts</h2>\n";
  for (const ChartInfo& c : chart_kinds()) {
    const std::string file = std::string(c.id) + "." + image_ext;
    out << "<figure><img src=\"" << escape_html(file) << "\" alt=\"" << escape_html(c.title) << "\"><figcaption>"
        << escape_html(chart_caption(c.kind)) << "</figcaption></figure>\n";
  }
  out << "<h2>Projection over link profiles</h2>\n<p>Measured figures are this run's; every column headed "
         "<i>projected</i> is computed from them.</p>\n<ul>\n";
  for (const std::string& a : projection_assumptions()) out << "<li>" << escape_html(a) << "</li>\n";
  out << "</ul>\n" << projection_html(projection_table(run.arms));
  if (cluster) {
    const std::vector<analysis::CheckRow> rows = analysis::check_rows(run, *cluster);
    out << "<h2>Predicted beside measured</h2>\n<p>" << escape_html(analysis::check_intro(*cluster)) << "</p>\n"
        << to_html(analysis::check_table(rows));
    if (const std::string summary = analysis::check_summary(rows); !summary.empty())
      out << "<p>" << escape_html(summary) << "</p>\n";
  }
  out << "</body>\n</html>\n";
  return out.str();
}

std::vector<fs::path> write_report(const RunResults& run, const analysis::ReportFormats& formats,
                                   const analysis::plan::ClusterProfile* cluster) {
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
  for (const auto& [file, svg] : analysis::pipeline_timeline_images(run)) write_text(dir / file, svg, written);
  const std::string image_ext = formats.png ? "png" : "svg";
  if (formats.md) {
    std::vector<analysis::ChartImage> images;
    if (formats.png || formats.svg)
      for (const ChartInfo& c : chart_kinds())
        images.push_back({std::string(c.id) + "." + image_ext, c.title, chart_caption(c.kind)});
    write_text(dir / "report.md", analysis::report_markdown(run, images) + analysis::check_markdown(run, cluster),
               written);
  }
  if (formats.html) write_text(dir / "index.html", report_html(run, image_ext, cluster), written);
  return written;
}

}  // namespace quartet::gui
