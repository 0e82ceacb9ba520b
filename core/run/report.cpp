#include "core/run/report.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "core/rules/closed_division.hpp"
#include "core/run/report_assets.hpp"
#include "core/run/rollout_record.hpp"

namespace mlpt::run {
namespace {

using nlohmann::json;

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

// A trainer metric per step (null where the trainer did not report it: a gap in the chart).
json trainer_series(const std::vector<StepRecord>& steps, const std::string& name) {
  json values = json::array();
  for (const auto& s : steps) {
    auto it = s.trainer.find(name);
    values.push_back(it == s.trainer.end() ? json(nullptr) : json(it->second));
  }
  return values;
}

// What the charts draw, as one JSON object the page's script reads.
json chart_data(const ReportInputs& in) {
  json samples = json::array(), reward = json::array(), max_staleness = json::array(), mean_staleness = json::array();
  for (const auto& s : in.steps) {
    samples.push_back(s.samples);
    reward.push_back(s.reward_mean);
    max_staleness.push_back(s.max_staleness);
    mean_staleness.push_back(s.mean_staleness);
  }
  json eval_samples = json::array(), pass_k = json::array(), pass_1 = json::array(), pass_hat_k = json::array();
  for (const auto& e : in.evals) {
    eval_samples.push_back(e.samples);
    pass_k.push_back(e.pass_at_k);
    pass_1.push_back(e.pass_at_1);
    pass_hat_k.push_back(e.pass_hat_k);
  }
  json phases = json::array(), seconds = json::array();
  for (const auto& [phase, s] : in.time_split) phases.push_back(phase), seconds.push_back(s);
  return {{"samples", samples},
          {"reward", reward},
          {"eval_samples", eval_samples},
          {"pass_at_k", pass_k},
          {"pass_at_1", pass_1},
          {"pass_hat_k", pass_hat_k},
          {"target", rules::kTargetAccuracy},
          {"loss", trainer_series(in.steps, "loss")},
          {"grad_norm", trainer_series(in.steps, "grad_norm")},
          {"logprob_error", trainer_series(in.steps, "logprob_abs_diff_mean")},
          {"logprob_error_masked", trainer_series(in.steps, "logprob_error_masked_sequences")},
          {"tis_masked", trainer_series(in.steps, "tis_masked_sequences")},
          {"truncated", trainer_series(in.steps, "truncated_sequences")},
          {"max_staleness", max_staleness},
          {"mean_staleness", mean_staleness},
          {"phases", phases},
          {"phase_seconds", seconds}};
}

// The page's chart code (uPlot 1.6): one chart per box, a title above, the legend below, labelled
// axes; the validation chart carries the target as a dashed line.
const char* kChartScript = R"js(
const D = JSON.parse(document.getElementById('mlpt-data').textContent);
const W = 560, H = 260;
// A tick label readable at any magnitude: exponent form below 1e-3 (a logprob error of 1e-7 would
// otherwise print as 0) and from 1e5, else at most 4 significant digits.
function tick(v) {
  if (v == null) return '';
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(1) : String(+v.toPrecision(4));
}
// A scale that fits its data: the smallest to the largest value, padded by 5% of their span (of
// the value when all are equal, 1 when that is 0); null (the library's choice) without data.
function fit(values) {
  const v = values.filter(x => x != null && isFinite(x));
  if (!v.length) return null;
  const lo = Math.min(...v), hi = Math.max(...v);
  const pad = (hi - lo) * 0.05 || Math.abs(lo) * 0.05 || 1;
  return [lo - pad, hi + pad];
}
function scale(values) {
  const r = fit(values);
  return r ? {time: false, range: () => r} : {time: false};
}
function line(id, title, xLabel, yLabel, xs, series) {
  const opts = {title, width: W, height: H, scales: {x: scale(xs), y: scale(series.flatMap(s => s.values))},
    axes: [{label: xLabel, values: (u, splits) => splits.map(tick)},
           {label: yLabel, values: (u, splits) => splits.map(tick), size: 64}],
    series: [{label: xLabel}].concat(series.map(s => ({label: s.label, stroke: s.color, width: 2,
      dash: s.dash, points: {show: !s.dash, size: 5, fill: s.color}})))};
  new uPlot(opts, [xs].concat(series.map(s => s.values)), document.getElementById(id));
}
line('chart-reward', 'Training reward', 'samples', 'mean reward', D.samples,
     [{label: 'reward mean', color: '#d1495b', values: D.reward}]);
line('chart-validation', 'Validation accuracy', 'samples', 'accuracy', D.eval_samples, [
  {label: 'pass@k', color: '#00798c', values: D.pass_at_k},
  {label: 'pass@1', color: '#edae49', values: D.pass_at_1},
  {label: 'pass^k', color: '#66a182', values: D.pass_hat_k},
  {label: 'target ' + D.target, color: '#555555', dash: [6, 4], values: D.eval_samples.map(() => D.target)}]);
line('chart-loss', 'Training loss', 'samples', 'loss', D.samples, [{label: 'loss', color: '#3d5a80', values: D.loss}]);
line('chart-grad-norm', 'Gradient norm', 'samples', 'norm (before clipping)', D.samples,
     [{label: 'grad norm', color: '#9c27b0', values: D.grad_norm}]);
line('chart-logprob-error', 'Logprob error (trainer vs engine)', 'samples', 'mean |Δ logprob|', D.samples,
     [{label: 'logprob error', color: '#ff7f0e', values: D.logprob_error}]);
line('chart-masked', 'Masked sequences', 'samples', 'sequences', D.samples, [
  {label: 'logprob-error masked', color: '#8c564b', values: D.logprob_error_masked},
  {label: 'TIS masked', color: '#e377c2', values: D.tis_masked},
  {label: 'truncated', color: '#7f7f7f', values: D.truncated}]);
line('chart-staleness', 'Staleness', 'samples', 'weight versions behind', D.samples, [
  {label: 'max', color: '#1f77b4', values: D.max_staleness},
  {label: 'mean', color: '#17becf', values: D.mean_staleness}]);
new uPlot({title: 'Time split (thread-seconds)', width: W + 160, height: H,
  scales: {x: {time: false, range: [-0.5, D.phases.length - 0.5]}},
  axes: [{label: 'phase', values: (u, splits) => splits.map(i => D.phases[i] ?? ''), incrs: [1], font: '11px sans-serif'},
         {label: 'seconds', values: (u, splits) => splits.map(tick), size: 64}],
  series: [{label: 'phase'}, {label: 'seconds', fill: '#4a7ab5', stroke: '#4a7ab5',
           paths: uPlot.paths.bars({size: [0.6]}), points: {show: false}}]},
  [D.phases.map((_, i) => i), D.phase_seconds], document.getElementById('chart-time'));
)js";

}  // namespace

void write_report(const std::filesystem::path& file, const ReportInputs& in) {
  const bool charts = kUplotJs[0] != '\0';
  double elapsed = in.steps.empty() ? 0 : in.steps.back().elapsed_s;
  std::ostringstream o;
  o << "<!doctype html><html><head><meta charset='utf-8'><title>mlpt run " << escape(in.name) << "</title>"
    << "<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse}"
       "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f4f4f4}.ok{color:#1a7f37}.bad{color:#b42318}"
       ".charts{display:flex;flex-wrap:wrap;gap:24px}.chart{min-height:300px}"
       "pre{background:#f7f7f7;padding:12px;white-space:pre-wrap}</style>";
  if (charts) o << "<style>" << kUplotCss << "</style><script>" << kUplotJs << "</script>";
  o << "</head><body>";
  o << "<h1>mlpt run: " << escape(in.name) << "</h1><p class='" << (in.converged ? "ok" : "bad") << "'><b>"
    << (in.converged ? "converged" : "not converged: " + escape(in.abort_reason)) << "</b> — time to train "
    << num(in.time_to_train_minutes, 2) << " min, " << in.steps.size() << " steps, " << in.rollouts << " rollouts, "
    << in.generated_tokens << " generated tokens, " << in.failed_rollouts << " failed rollouts (back-filled)";
  if (elapsed > 0) o << ", " << num(in.rollouts / elapsed, 2) << " rollouts/s, " << num(in.generated_tokens / elapsed, 0) << " tokens/s";
  o << "</p>";
  if (!in.lost_workers.empty()) {
    o << "<p class='bad'><b>" << in.lost_workers.size()
      << " rollout worker(s) lost</b> during the run; each one's episodes in "
      << "flight were back-filled with reward 0 (counted above) and the run went on with the others:</p><ul>";
    for (const auto& why : in.lost_workers) o << "<li>" << escape(why) << "</li>";
    o << "</ul>";
  }
  {
    // Where the run can be watched while it goes, and looked into afterwards.
    const auto folder = file.parent_path();
    auto link = [&](const std::filesystem::path& p, const std::string& tail) {
      std::string href = p.lexically_relative(folder).generic_string() + tail;
      for (size_t at; (at = href.find('\'')) != std::string::npos;) href.replace(at, 1, "%27");
      return "<a href='" + href + "'>" + escape(p.filename().string() + tail) + "</a>";
    };
    o << "<p>timeline: ";
    if (in.trace.empty()) o << "none ([run] trace_max_mb = 0)";
    else o << link(in.trace, "") << " (open it in ui.perfetto.dev or chrome://tracing)";
    if (!in.tensorboard.empty())
      o << " — TensorBoard events: " << link(in.tensorboard, "/") << " (<code>tensorboard --logdir "
        << escape(in.tensorboard.string()) << "</code>)";
    o << "</p>";
  }
  if (!in.highlighted_rollouts.empty()) {
    o << "<p>rollouts:";
    for (const auto& [label, r] : in.highlighted_rollouts)
      o << " <a href='#rollout-" << r.value("id", int64_t(-1)) << "'>" << escape(label) << " (#" << r.value("id", int64_t(-1))
        << ", reward " << num(r["reward"].value("value", 0.0)) << ")</a>";
    o << " — every rollout: <code>mlpt rollout show RUN_DIR --id N</code></p>";
  }
  if (charts) {
    o << "<div class='charts'>";
    for (const char* id : {"chart-reward", "chart-validation", "chart-loss", "chart-grad-norm", "chart-logprob-error",
                           "chart-masked", "chart-staleness", "chart-time"})
      o << "<div class='chart' id='" << id << "'></div>";
    std::string data = chart_data(in).dump();
    // JSON inside <script>: a "</" would end the element.
    for (size_t at; (at = data.find("</")) != std::string::npos;) data.replace(at, 2, "<\\/");
    o << "</div><script type='application/json' id='mlpt-data'>" << data << "</script><script>" << kChartScript
      << "</script><p style='color:#777;font-size:12px'>charts: " << kUplotVersion << "</p>";
  } else {
    o << "<p class='bad'>No charts: this mlpt was built without its charting library (run "
         "scripts/vendor-report-charts.sh, then rebuild). The tables below hold the same data.</p>";
  }
  // The core's own cost per rollout (chat rendering, reply parsing, token bookkeeping) against the
  // plugins' time in the same rollouts: what the framework adds.
  double core = 0, plugins = 0;
  o << "<h2>Time split</h2><table><tr><th>phase</th><th>thread-seconds</th></tr>";
  for (const auto& [what, seconds] : in.time_split) {
    o << "<tr><td>" << escape(what) << "</td><td>" << num(seconds, 1) << "</td></tr>";
    if (what == "core") core = seconds;
    else if (what == "generation" || what == "environment" || what == "reward") plugins += seconds;
  }
  o << "</table>";
  if (in.rollouts > 0)
    o << "<p>core overhead: " << num(core / static_cast<double>(in.rollouts) * 1e3, 3) << " ms per rollout, "
      << num(plugins > 0 ? core / plugins * 100 : 0, 3) << "% of the plugins' time in rollouts</p>";
  uint64_t refit_bytes = 0, dense_bytes = 0;
  for (const auto& s : in.steps) refit_bytes += s.refit.bytes, dense_bytes += s.refit.dense_bytes;
  if (dense_bytes > 0)
    o << "<p>refit: " << num(static_cast<double>(refit_bytes) / 1e6, 3) << " MB moved over " << in.steps.size() << " steps, "
      << num(static_cast<double>(refit_bytes) / static_cast<double>(dense_bytes) * 100, 3) << "% of the "
      << num(static_cast<double>(dense_bytes) / 1e6, 3) << " MB dense refits move</p>";
  o << "<h2>Steps</h2><table><tr><th>step</th><th>samples</th><th>reward</th><th>staleness max</th><th>tokens</th><th>trainable</th>"
       "<th>zero-adv groups</th><th>wait s</th><th>train s</th><th>transfer s</th><th>refit</th><th>refit MB</th><th>pass@k</th></tr>";
  for (const auto& s : in.steps)
    o << "<tr><td>" << s.step << "</td><td>" << s.samples << "</td><td>" << num(s.reward_mean) << "</td><td>" << s.max_staleness
      << "</td><td>" << s.tokens << "</td><td>" << s.trainable_tokens << "</td><td>" << s.zero_advantage_groups << "</td><td>"
      << num(s.wait_s, 2) << "</td><td>" << num(s.train_s, 2) << "</td><td>" << num(s.transfer_s, 3) << "</td><td>"
      << escape(s.refit.mode) << "</td><td>" << num(static_cast<double>(s.refit.bytes) / 1e6, 3) << "</td><td>"
      << (s.evaluated ? num(s.pass_at_k) : "") << "</td></tr>";
  o << "</table>";
  // What plugins reported through host services `metric`: each name's latest value and its range.
  std::map<std::string, std::tuple<double, double, double, int64_t>> plugin_metrics;  // last, min, max, steps
  for (const auto& s : in.steps)
    for (const auto& [name, value] : s.plugins) {
      auto [it, fresh] = plugin_metrics.try_emplace(name, value, value, value, 0);
      auto& [last, lo, hi, n] = it->second;
      last = value, lo = std::min(lo, value), hi = std::max(hi, value), ++n;
    }
  if (!plugin_metrics.empty()) {
    o << "<h2>Plugin metrics</h2><table><tr><th>name</th><th>last</th><th>min</th><th>max</th><th>steps</th></tr>";
    for (const auto& [name, v] : plugin_metrics)
      o << "<tr><td>" << escape(name) << "</td><td>" << num(std::get<0>(v)) << "</td><td>" << num(std::get<1>(v))
        << "</td><td>" << num(std::get<2>(v)) << "</td><td>" << std::get<3>(v) << "</td></tr>";
    o << "</table>";
  }
  for (const auto& [label, r] : in.highlighted_rollouts)
    o << "<h2 id='rollout-" << r.value("id", int64_t(-1)) << "'>" << escape(label) << "</h2><pre>" << escape(format_transcript(r)) << "</pre>";
  o << "</body></html>\n";
  std::ofstream(file) << o.str();
}

}  // namespace mlpt::run
