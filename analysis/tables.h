#pragma once

// Tables and figures as the summary and the report print them: Markdown here, HTML in
// the Qt report (gui/report.h), from the same Table.

#include <string>
#include <vector>

namespace quartet::analysis {

struct Table {
  std::vector<std::string> headers;
  std::vector<bool> right;  // right-aligned (numbers), one per header
  std::vector<std::vector<std::string>> rows;
};

// A Markdown table; a cell's '|' is escaped and its line breaks become spaces.
std::string to_markdown(const Table& t);

// What a terminal shows of `s`: its characters (UTF-8 code points), each one column.
int display_width(const std::string& s);

// `s` cut to `width` columns, its end replaced by "…" when it is cut.
std::string cut_to_width(const std::string& s, int width);

// A plain-text table for a terminal `columns` wide: columns aligned, two spaces apart.
// While it is wider, columns are left out in `drop_order` (indices into t.headers, the
// first left out first); the headers of those left out are added to `left_out`.
std::string text_table(const Table& t, int columns, const std::vector<size_t>& drop_order,
                       std::vector<std::string>* left_out = nullptr);

// Text for an SVG or HTML page: < > & " escaped.
std::string escape_xml(const std::string& s);

// `v` with `digits` decimals: fixed(2.268, 2) is "2.27".
std::string fixed(double v, int digits);

// Numbers as tables and charts print them: "1.58 GB", "512 B"; "24.5 MiB"; "45 ms",
// "12.3 s", "2:05", "1:02:05" ("—" for a negative or NaN time).
std::string format_bytes(double bytes);
std::string format_mib(double bytes);
std::string format_seconds(double seconds);

}  // namespace quartet::analysis
