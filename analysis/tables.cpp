#include "analysis/tables.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace quartet::analysis {

namespace {

std::string escape_md(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

}  // namespace

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

int display_width(const std::string& s) {
  int n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;  // continuation bytes take no column
  return n;
}

std::string cut_to_width(const std::string& s, int width) {
  if (display_width(s) <= width) return s;
  if (width <= 0) return "";
  std::string out;
  int n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) != 0x80 && ++n > width - 1) break;
    out += s[i];
  }
  return out + "\u2026";
}

std::string text_table(const Table& t, int columns, const std::vector<size_t>& drop_order,
                       std::vector<std::string>* left_out) {
  std::vector<bool> shown(t.headers.size(), true);
  std::vector<int> widths(t.headers.size(), 0);
  for (size_t c = 0; c < t.headers.size(); ++c) {
    widths[c] = display_width(t.headers[c]);
    for (const auto& row : t.rows)
      if (c < row.size()) widths[c] = std::max(widths[c], display_width(row[c]));
  }
  auto total = [&] {
    int w = 0, n = 0;
    for (size_t c = 0; c < widths.size(); ++c)
      if (shown[c]) w += widths[c], ++n;
    return w + 2 * std::max(0, n - 1);
  };
  for (size_t drop : drop_order) {
    if (total() <= columns) break;
    if (drop == 0 || drop >= shown.size() || !shown[drop]) continue;
    shown[drop] = false;
    if (left_out) left_out->push_back(t.headers[drop]);
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c < cells.size() && c < shown.size(); ++c) {
      if (!shown[c]) continue;
      const std::string pad(static_cast<size_t>(widths[c] - display_width(cells[c])), ' ');
      if (!out.empty()) out += "  ";
      out += t.right[c] ? pad + cells[c] : cells[c] + pad;
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(t.headers);
  std::vector<std::string> rule;
  for (int w : widths) rule.emplace_back(static_cast<size_t>(w), '-');
  out += line(rule);
  for (const auto& row : t.rows) out += line(row);
  return out;
}

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (std::abs(bytes) >= 1000.0 && u < 4) bytes /= 1000.0, ++u;
  if (u == 0) return fixed(bytes, 0) + " B";
  return fixed(bytes, bytes < 10 ? 2 : 1) + " " + units[u];
}

std::string format_mib(double bytes) { return fixed(bytes / (1024.0 * 1024.0), 1) + " MiB"; }

std::string format_seconds(double seconds) {
  if (!(seconds >= 0)) return "—";
  if (seconds < 1.0) return fixed(seconds * 1000.0, seconds < 0.01 ? 2 : 0) + " ms";
  if (seconds < 60.0) return fixed(seconds, 1) + " s";
  const long long t = std::llround(seconds);
  char buf[48];
  if (t < 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

}  // namespace quartet::analysis
