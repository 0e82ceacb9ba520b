// The report as a person sees it: write_report on a run's worth of records, rendered by headless
// Chromium, and the screenshot must show each chart drawn by the charting library: pixels of each
// chart's series colour, more than a legend marker has, so a chart whose canvas stayed blank fails
// (the logprob error's values are of 1e-7, as a real run's are). The page's tick labels and scales,
// evaluated by the same Chromium: values below 1e-3 print readably, not as 0, and a scale spans
// its data with a small margin.
// Exit 0 pass, 1 fail, 77 skip (no chromium, or a build without the vendored charting library).
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "core/run/report.hpp"
#include "core/run/report_assets.hpp"

namespace fs = std::filesystem;

namespace {

struct Image {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // 3 bytes per pixel
};

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

// An 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes); throws on anything else.
Image read_png(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8 || bytes[1] != 'P' || bytes[2] != 'N' || bytes[3] != 'G') throw std::runtime_error(file.string() + ": not a PNG");
  Image img;
  int channels = 0;
  std::vector<uint8_t> idat;
  for (size_t at = 8; at + 12 <= bytes.size();) {
    const uint32_t len = be32(&bytes[at]);
    const std::string type(bytes.begin() + long(at) + 4, bytes.begin() + long(at) + 8);
    const uint8_t* data = &bytes[at + 8];
    if (type == "IHDR") {
      img.width = be32(data), img.height = be32(data + 4);
      if (data[8] != 8 || (data[9] != 2 && data[9] != 6) || data[12] != 0) throw std::runtime_error("unsupported PNG format");
      channels = data[9] == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      idat.insert(idat.end(), data, data + len);
    }
    at += 12 + len;
  }
  const size_t stride = size_t(img.width) * size_t(channels);
  std::vector<uint8_t> raw((stride + 1) * img.height);
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, idat.data(), idat.size()) != Z_OK || raw_size != raw.size())
    throw std::runtime_error("PNG data does not inflate");
  std::vector<uint8_t> pixels(stride * img.height), previous(stride, 0);
  for (uint32_t y = 0; y < img.height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* line = &raw[y * (stride + 1) + 1];
    uint8_t* out = &pixels[y * stride];
    for (size_t x = 0; x < stride; ++x) {
      const int a = x >= size_t(channels) ? out[x - channels] : 0, b = previous[x],
                c = x >= size_t(channels) ? previous[x - channels] : 0;
      int predictor = 0;
      switch (filter) {
        case 0: predictor = 0; break;
        case 1: predictor = a; break;
        case 2: predictor = b; break;
        case 3: predictor = (a + b) / 2; break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default: throw std::runtime_error("bad PNG filter");
      }
      out[x] = uint8_t(line[x] + predictor);
    }
    std::copy(out, out + stride, previous.begin());
  }
  img.rgb.reserve(size_t(img.width) * img.height * 3);
  for (size_t i = 0; i < pixels.size(); i += size_t(channels)) img.rgb.insert(img.rgb.end(), &pixels[i], &pixels[i] + 3);
  return img;
}

// Pixels within a small distance of colour #rrggbb (anti-aliasing blends the edges).
size_t count_colour(const Image& img, uint32_t colour) {
  const int r = int(colour >> 16), g = int(colour >> 8 & 0xff), b = int(colour & 0xff);
  size_t n = 0;
  for (size_t i = 0; i + 2 < img.rgb.size(); i += 3)
    if (std::abs(img.rgb[i] - r) + std::abs(img.rgb[i + 1] - g) + std::abs(img.rgb[i + 2] - b) <= 24) ++n;
  return n;
}

std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"})
    for (const char* dir : {"/usr/bin/", "/usr/local/bin/", "/snap/bin/"})
      if (fs::exists(std::string(dir) + name)) return std::string(dir) + name;
  return "";
}

// A run's worth of records: rising reward, evaluations crossing the target, trainer metrics.
mlpt::run::ReportInputs sample_run() {
  mlpt::run::ReportInputs in;
  in.name = "render-test";
  for (int s = 1; s <= 12; ++s) {
    mlpt::run::StepRecord r;
    r.step = s, r.samples = s * 256, r.reward_mean = 0.1 + 0.06 * s, r.max_staleness = s % 2, r.mean_staleness = 0.5;
    r.elapsed_s = 60.0 * s;
    r.trainer = {{"loss", 1.0 / s},
                 {"grad_norm", 2.0 + std::sin(s)},
                 {"logprob_abs_diff_mean", 1e-7 * s},
                 {"logprob_error_masked_sequences", double(s % 3)},
                 {"tis_masked_sequences", double(s % 4)},
                 {"truncated_sequences", double(s % 2)}};
    in.steps.push_back(r);
    if (s >= 4) in.evals.push_back({s * 256, 0.3 + 0.05 * s, 0.2 + 0.04 * s, 0.1 + 0.03 * s, 30});
  }
  in.time_split = {{"generation", 900}, {"environment", 400}, {"reward", 120}, {"core", 5},
                   {"training", 300}, {"weight transfer", 20}, {"validation", 200}};
  in.converged = true;
  in.time_to_train_minutes = 12;
  in.rollouts = 3072, in.generated_tokens = 1000000;
  return in;
}

// The report's own tick and scale functions run by Chromium on values a run produces; the page
// prints their results into the DOM, which --dump-dom returns.
int check_ticks_and_scales(const std::string& chromium, const fs::path& dir) {
  std::ifstream in(dir / "report.html");
  std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<double> values = {1.5e-7, 2.5e-4, 0.0, 0.25, 1.2345678, 123456.0, -3e-6};
  std::string list;
  for (double v : values) {
    char b[32];
    std::snprintf(b, sizeof b, "%.17g", v);
    list += (list.empty() ? "" : ",") + std::string(b);
  }
  const std::string probe = "<script>document.body.insertAdjacentHTML('beforeend', '<pre id=\"probe\">' + JSON.stringify(["
                            "[" + list + "].map(tick), fit([1e-7, 3e-7, null, 2e-7]), fit([5, 5])]) + '</pre>');</script>";
  page.insert(page.rfind("</body>"), probe);
  std::ofstream(dir / "probe.html") << page;
  const fs::path dom = dir / "probe.dom";
  const std::string command = chromium + " --headless=new --no-sandbox --disable-gpu --virtual-time-budget=10000 --dump-dom file://" +
                              fs::absolute(dir / "probe.html").string() + " >" + dom.string() + " 2>/dev/null";
  if (std::system(command.c_str()) != 0) {
    std::cout << "FAIL: chromium could not dump the probe page\n";
    return 1;
  }
  std::ifstream dumped(dom);
  const std::string text((std::istreambuf_iterator<char>(dumped)), std::istreambuf_iterator<char>());
  const auto from = text.rfind("<pre id=\"probe\">"), to = text.find("</pre>", from);  // the element, not the script
  if (from == std::string::npos || to == std::string::npos) {
    std::cout << "FAIL: the probe of the tick labels did not run (" << dom.string() << ")\n";
    return 1;
  }
  const std::string json = text.substr(from + 16, to - from - 16);
  std::cout << "tick labels and fitted scales: " << json << "\n";
  // The labels, in order: each reads back to its value within the precision it shows, never "0"
  // for a non-zero value; the scales hold their data with at most 5% of the span beyond each end.
  std::vector<std::string> labels;
  size_t at = 2;
  for (size_t i = 0; i < values.size(); ++i) {
    const size_t q = json.find('"', at + 1);
    labels.push_back(json.substr(at + 1, q - at - 1));
    at = json.find('"', q + 1);
  }
  int failures = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const double back = std::strtod(labels[i].c_str(), nullptr);
    const bool readable = values[i] == 0 ? labels[i] == "0" : std::fabs(back - values[i]) <= 0.05 * std::fabs(values[i]);
    std::cout << (readable ? "ok   " : "FAIL ") << "tick " << values[i] << " -> \"" << labels[i] << "\"\n";
    failures += !readable;
  }
  double lo = 0, hi = 0, flat_lo = 0, flat_hi = 0;
  const auto scales = json.substr(json.find("],[") + 3);
  if (std::sscanf(scales.c_str(), "%lf,%lf],[%lf,%lf]", &lo, &hi, &flat_lo, &flat_hi) != 4) {
    std::cout << "FAIL: no fitted scales in the probe\n";
    return failures + 1;
  }
  const double span = 3e-7 - 1e-7;
  const bool fits = lo <= 1e-7 && hi >= 3e-7 && 1e-7 - lo <= 0.05 * span * 1.0001 && hi - 3e-7 <= 0.05 * span * 1.0001;
  const bool flat = flat_lo < 5 && flat_hi > 5;
  std::cout << (fits ? "ok   " : "FAIL ") << "scale of [1e-7, 3e-7]: [" << lo << ", " << hi << "]\n";
  std::cout << (flat ? "ok   " : "FAIL ") << "scale of [5, 5]: [" << flat_lo << ", " << flat_hi << "]\n";
  return failures + !fits + !flat;
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path dir = argc > 1 ? fs::path(argv[1]) : fs::temp_directory_path() / "mlpt-report-render";
  if (mlpt::run::kUplotJs[0] == '\0') {
    std::cout << "SKIP: this build has no charting library (scripts/vendor-report-charts.sh, then rebuild)\n";
    return 77;
  }
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    std::cout << "SKIP: no chromium (Debian package `chromium`, installed by scripts/setup.sh)\n";
    return 77;
  }
  fs::remove_all(dir);
  fs::create_directories(dir);
  mlpt::run::write_report(dir / "report.html", sample_run());
  const fs::path shot = dir / "report.png";
  const std::string command = chromium + " --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,2600 "
                              "--virtual-time-budget=10000 --screenshot=" + shot.string() + " file://" +
                              fs::absolute(dir / "report.html").string() + " >" + (dir / "chromium.log").string() + " 2>&1";
  if (std::system(command.c_str()) != 0 || !fs::exists(shot)) {
    std::cout << "FAIL: chromium did not render the report (" << (dir / "chromium.log").string() << ")\n";
    return 1;
  }
  const Image img = read_png(shot);
  std::cout << "screenshot " << img.width << "x" << img.height << " (" << shot.string() << ")\n";
  // Each chart's own series colour (core/run/report.cpp). A legend marker is a few dozen pixels; a
  // drawn line across a chart is hundreds.
  const std::map<std::string, uint32_t> charts = {
      {"training reward", 0xd1495b}, {"validation pass@k", 0x00798c}, {"loss", 0x3d5a80},     {"gradient norm", 0x9c27b0},
      {"logprob error", 0xff7f0e},   {"masked sequences", 0x8c564b},  {"staleness", 0x1f77b4}, {"time split", 0x4a7ab5}};
  constexpr size_t kDrawn = 300;
  int failures = 0;
  for (const auto& [chart, colour] : charts) {
    const size_t n = count_colour(img, colour);
    char hex[8];
    std::snprintf(hex, sizeof hex, "%06x", colour);
    std::cout << (n >= kDrawn ? "ok   " : "FAIL ") << chart << ": " << n << " pixels of #" << hex << "\n";
    failures += n < kDrawn;
  }
  // The page is not blank beyond the charts either: most of it is background, not all.
  const size_t white = count_colour(img, 0xffffff), total = size_t(img.width) * img.height;
  if (white == total) ++failures, std::cout << "FAIL: the screenshot is blank\n";
  failures += check_ticks_and_scales(chromium, dir);
  return failures ? 1 : 0;
}
