#include "git_history.hpp"

#include "editor.hpp"  // shell_quote

namespace mlpt::openhands {

std::string trim_history_command(const std::string& workspace, const std::string& base_word,
                                 const std::string& fix) {
  // Everything a later commit could be reached through: HEAD away from the base, refs other than
  // the branch HEAD names (tags, remotes, stash, notes, other branches), reflog entries, the
  // *_HEAD files, other worktrees, alternate object stores, the fix commit, and unreferenced commit
  // objects (more commits stored than the base has ancestors). Then the same removed, in order:
  // the reset writes ORIG_HEAD, so the files go after it; the reflogs expire before the repack so
  // that it keeps only what the base reaches (and copies in what alternates held); prune takes
  // the loose rest.
  return "cd " + shell_quote(workspace) +
         " || exit 1\n"
         "g() { git -c safe.directory='*' -c gc.auto=0 -c core.hooksPath=/dev/null \"$@\"; }\n"
         "base=" +
         base_word + "; fix=" + shell_quote(fix) +
         "\n"
         "gd=$(g rev-parse --git-dir) || exit 1\n"
         "head=$(g symbolic-ref -q HEAD)\n"
         "files='FETCH_HEAD ORIG_HEAD MERGE_HEAD CHERRY_PICK_HEAD REVERT_HEAD BISECT_HEAD AUTO_MERGE'\n"
         "found=\n"
         "[ \"$(g rev-parse HEAD)\" = \"$base\" ] || found=\"$found HEAD\"\n"
         "g for-each-ref --format='%(refname)' | grep -qvxF \"${head:-@@detached@@}\" && found=\"$found "
         "refs\"\n"
         "[ -n \"$(g rev-list -n 1 --all --reflog --not \"$base\" 2>/dev/null)\" ] && found=\"$found "
         "reflog\"\n"
         "for f in $files; do [ -e \"$gd/$f\" ] && found=\"$found $f\"; done\n"
         "[ -e \"$gd/worktrees\" ] && found=\"$found worktrees\"\n"
         "[ -s \"$gd/objects/info/alternates\" ] && found=\"$found alternates\"\n"
         "[ -n \"$fix\" ] && [ \"$fix\" != \"$base\" ] && g cat-file -e \"$fix^{commit}\" 2>/dev/null && "
         "found=\"$found fix\"\n"
         "if [ -z \"$found\" ]; then\n"
         "  stored=$(g cat-file --batch-all-objects --batch-check='%(objecttype)' | grep -c '^commit$')\n"
         "  [ \"$stored\" -gt \"$(g rev-list --count \"$base\")\" ] && found=' objects'\n"
         "fi\n"
         "[ -z \"$found\" ] && exit 0\n"
         "set -e\n"
         "[ \"$(g rev-parse HEAD)\" = \"$base\" ] || g reset -q --mixed \"$base\"\n"
         "g for-each-ref --format='%(refname)' | while IFS= read -r r; do [ \"$r\" = \"$head\" ] || g "
         "update-ref -d \"$r\"; done\n"
         "for f in $files; do rm -f \"$gd/$f\"; done\n"
         "rm -rf \"$gd/worktrees\"\n"
         "g reflog expire --expire=now --expire-unreachable=now --all\n"
         "g repack -a -d -q\n"
         "rm -f \"$gd/objects/info/alternates\"\n"
         "g prune --expire=now\n"
         "printf '@@MLPT_TRIMMED@@%s\\n' \"$found\"\n";
}

}  // namespace mlpt::openhands
