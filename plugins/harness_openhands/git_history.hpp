// The agent's repository holds the base commit's history only: no ref, reflog entry, stash, FETCH_HEAD
// or object of the fix or anything later (docs/benchmark.md §4). The bundled suite's images are built
// that way; an image prepared elsewhere (R2E-Gym's, converted to SIF) may hold the whole upstream
// history, so the episode trims it in the agent's sandbox before the agent runs.
#pragma once

#include <string>

namespace mlpt::openhands {

// A shell command run in `workspace` that leaves only `base`'s history (HEAD, and the branch HEAD
// names, at `base`; the index reset to it, the working tree untouched) and prints "@@MLPT_TRIMMED@@"
// when it had anything to remove. It first checks, cheaply, whether anything reaches past `base`
// (another ref, a reflog entry, a stash, FETCH_HEAD and the like, an alternate object store, the
// fix commit `fix` when given, more commit objects than `base` has ancestors) and removes nothing
// when nothing does, so an image built trimmed costs one look. Fails (exit status not 0) when the
// trimming fails.
std::string trim_history_command(const std::string& workspace, const std::string& base,
                                 const std::string& fix);

}  // namespace mlpt::openhands
