// Patches that reach into what in-process grading relies on: the test runner (pytest and its
// hooks), the import machinery (sys.modules, meta path, import hooks, .pth files, site
// customisation, entry points), the call stack (frames, tracing, gc referrers) and process exit.
// Such a patch can make the hidden tests report a pass without a fix, from inside the process
// that runs them, which no output check can rule out; its reward is flagged for review.
#pragma once

#include <string>
#include <vector>

namespace mlpt::r2e {

struct TamperFinding {
  std::string file;     // b/ path of the patched file
  std::string pattern;  // what matched
  std::string line;     // the added line (first 160 bytes)
};

// Scans the lines a unified diff adds (and the names of the files it creates) for the patterns.
std::vector<TamperFinding> scan_patch_for_tampering(const std::string& patch);

}  // namespace mlpt::r2e
