#include "core/run/report.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/run/rollout_record.hpp"

namespace mlpt::run {
namespace {

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return o;
}

std::string num(double v, int digits = 3) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

struct Series {
  std::string label, color;
  std::vector<std::pair<double, double>> points;
};

// A line chart of y in [0, 1] over x, as inline SVG.
std::string line_chart(const std::string& title, const std::vector<Series>& series, const std::string& x_label) {
  const double w = 560, h = 240, l = 48, r = 12, t = 28, b = 36;
  double x_max = 1;
  for (const auto& s : series)
    for (auto [x, y] : s.points) x_max = std::max(x_max, x);
  auto px = [&](double x) { return l + (w - l - r) * x / x_max; };
  auto py = [&](double y) { return t + (h - t - b) * (1 - std::clamp(y, 0.0, 1.0)); };
  std::ostringstream o;
  o << "<svg width='" << w << "' height='" << h << "' viewBox='0 0 " << w << " " << h << "'>";
  o << "<text x='" << l << "' y='18' font-weight='bold'>" << escape(title) << "</text>";
  for (double y : {0.0, 0.25, 0.5, 0.75, 1.0})
    o << "<line x1='" << l << "' x2='" << w - r << "' y1='" << py(y) << "' y2='" << py(y) << "' stroke='#ddd'/>"
      << "<text x='" << l - 6 << "' y='" << py(y) + 4 << "' text-anchor='end' font-size='11'>" << num(y, 2) << "</text>";
  o << "<text x='" << (l + w - r) / 2 << "' y='" << h - 6 << "' text-anchor='middle' font-size='12'>" << escape(x_label) << "</text>";
  o << "<text x='" << w - r << "' y='" << h - b + 14 << "' text-anchor='end' font-size='11'>" << num(x_max, 0) << "</text>";
  double legend_x = l + 160;
  for (const auto& s : series) {
    std::string path;
    for (auto [x, y] : s.points) path += (path.empty() ? "M" : "L") + num(px(x), 1) + "," + num(py(y), 1) + " ";
    if (!path.empty()) o << "<path d='" << path << "' fill='none' stroke='" << s.color << "' stroke-width='2'/>";
    for (auto [x, y] : s.points) o << "<circle cx='" << px(x) << "' cy='" << py(y) << "' r='2.5' fill='" << s.color << "'/>";
    o << "<rect x='" << legend_x << "' y='9' width='12' height='12' fill='" << s.color << "'/><text x='" << legend_x + 16
      << "' y='19' font-size='12'>" << escape(s.label) << "</text>";
    legend_x += 24 + 8.0 * s.label.size();
  }
  o << "</svg>";
  return o.str();
}

// Horizontal bars of seconds per phase.
std::string bar_chart(const std::string& title, const std::vector<std::pair<std::string, double>>& bars) {
  const double w = 560, row = 24, l = 130;
  double total = 0, max_v = 1e-9;
  for (const auto& [k, v] : bars) total += v, max_v = std::max(max_v, v);
  std::ostringstream o;
  o << "<svg width='" << w << "' height='" << 34 + row * bars.size() << "'><text x='0' y='18' font-weight='bold'>" << escape(title) << "</text>";
  double y = 30;
  for (const auto& [k, v] : bars) {
    double bw = (w - l - 120) * v / max_v;
    o << "<text x='" << l - 8 << "' y='" << y + 15 << "' text-anchor='end' font-size='12'>" << escape(k) << "</text>"
      << "<rect x='" << l << "' y='" << y + 3 << "' width='" << bw << "' height='" << row - 8 << "' fill='#4a7ab5'/>"
      << "<text x='" << l + bw + 6 << "' y='" << y + 15 << "' font-size='12'>" << num(v, 1) << " s (" << num(total > 0 ? 100 * v / total : 0, 1) << "%)</text>";
    y += row;
  }
  o << "</svg>";
  return o.str();
}

}  // namespace

void write_report(const std::filesystem::path& file, const ReportInputs& in) {
  std::vector<Series> reward{{"reward mean", "#d1495b", {}}}, eval{{"pass@k", "#00798c", {}}, {"pass@1", "#edae49", {}}, {"pass^k", "#66a182", {}}};
  for (const auto& s : in.steps) reward[0].points.push_back({static_cast<double>(s.samples), s.reward_mean});
  for (const auto& e : in.evals) {
    eval[0].points.push_back({static_cast<double>(e.samples), e.pass_at_k});
    eval[1].points.push_back({static_cast<double>(e.samples), e.pass_at_1});
    eval[2].points.push_back({static_cast<double>(e.samples), e.pass_hat_k});
  }
  double elapsed = in.steps.empty() ? 0 : in.steps.back().elapsed_s;
  std::ostringstream o;
  o << "<!doctype html><html><head><meta charset='utf-8'><title>mlpt run " << escape(in.name) << "</title>"
    << "<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse}"
       "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f4f4f4}.ok{color:#1a7f37}.bad{color:#b42318}</style></head><body>";
  o << "<h1>mlpt run: " << escape(in.name) << "</h1><p class='" << (in.converged ? "ok" : "bad") << "'><b>"
    << (in.converged ? "converged" : "not converged: " + escape(in.abort_reason)) << "</b> — time to train "
    << num(in.time_to_train_minutes, 2) << " min, " << in.steps.size() << " steps, " << in.rollouts << " rollouts, "
    << in.generated_tokens << " generated tokens";
  if (elapsed > 0) o << ", " << num(in.rollouts / elapsed, 2) << " rollouts/s, " << num(in.generated_tokens / elapsed, 0) << " tokens/s";
  o << "</p>";
  if (!in.highlighted_rollouts.empty()) {
    o << "<p>rollouts:";
    for (const auto& [label, r] : in.highlighted_rollouts)
      o << " <a href='#rollout-" << r.value("id", int64_t(-1)) << "'>" << escape(label) << " (#" << r.value("id", int64_t(-1))
        << ", reward " << num(r["reward"].value("value", 0.0)) << ")</a>";
    o << " — every rollout: <code>mlpt rollout show RUN_DIR --id N</code></p>";
  }
  o << line_chart("Training reward over samples", reward, "samples") << "<br>";
  o << line_chart("Validation over samples", eval, "samples") << "<br>";
  o << bar_chart("Time split (thread-seconds)", in.time_split);
  // The core's own cost per rollout (chat rendering, reply parsing, token bookkeeping) against the
  // plugins' time in the same rollouts: what the framework adds.
  double core = 0, plugins = 0;
  for (const auto& [what, seconds] : in.time_split)
    if (what == "core") core = seconds;
    else if (what == "generation" || what == "environment" || what == "reward") plugins += seconds;
  if (in.rollouts > 0)
    o << "<p>core overhead: " << num(core / static_cast<double>(in.rollouts) * 1e3, 3) << " ms per rollout, "
      << num(plugins > 0 ? core / plugins * 100 : 0, 3) << "% of the plugins' time in rollouts</p>";
  o << "<h2>Steps</h2><table><tr><th>step</th><th>samples</th><th>reward</th><th>staleness max</th><th>tokens</th><th>trainable</th>"
       "<th>zero-adv groups</th><th>wait s</th><th>train s</th><th>transfer s</th><th>pass@k</th></tr>";
  for (const auto& s : in.steps)
    o << "<tr><td>" << s.step << "</td><td>" << s.samples << "</td><td>" << num(s.reward_mean) << "</td><td>" << s.max_staleness
      << "</td><td>" << s.tokens << "</td><td>" << s.trainable_tokens << "</td><td>" << s.zero_advantage_groups << "</td><td>"
      << num(s.wait_s, 2) << "</td><td>" << num(s.train_s, 2) << "</td><td>" << num(s.transfer_s, 3) << "</td><td>"
      << (s.evaluated ? num(s.pass_at_k) : "") << "</td></tr>";
  o << "</table>";
  for (const auto& [label, r] : in.highlighted_rollouts)
    o << "<h2 id='rollout-" << r.value("id", int64_t(-1)) << "'>" << escape(label) << "</h2><pre>" << escape(format_transcript(r)) << "</pre>";
  o << "</body></html>\n";
  std::ofstream(file) << o.str();
}

}  // namespace mlpt::run
