// The report's charting library, uPlot, vendored from npm at build time
// (scripts/vendor-report-charts.sh) and compiled in (core/CMakeLists.txt generates the definitions),
// so a report is one self-contained HTML file. Empty strings when it was not vendored.
#pragma once

namespace mlpt::run {

extern const char kUplotVersion[];  // e.g. "uplot@1.6.32"
extern const char kUplotJs[];       // dist/uPlot.iife.min.js
extern const char kUplotCss[];      // dist/uPlot.min.css

}  // namespace mlpt::run
