#include "analysis/tables.h"

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
