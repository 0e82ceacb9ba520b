// `mlpt tokenize --tokenizer PATH [--decode] [--special]`: text on stdin to ids on stdout (one line,
// space-separated), or with --decode ids (whitespace-separated) to text.
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

#include "core/cli/args.hpp"
#include "core/cli/command.hpp"
#include "core/text/tokenizer.hpp"

namespace mlpt::cli {
namespace {

int tokenize(const std::vector<std::string>& argv) {
  Args args(argv, {"--decode", "--special"}, {"--tokenizer"});
  // A stray word would otherwise be ignored while the command waits on stdin for the text.
  if (!args.positionals().empty())
    throw Error("unexpected argument '" + args.positionals()[0] + "' (the text or ids come on stdin)");
  auto tok = text::Tokenizer::load(args.required("--tokenizer"));
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (args.flag("--decode")) {
    std::vector<int32_t> ids;
    std::istringstream in(input);
    std::string word;
    while (in >> word) {
      size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(word, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != word.size() || v < 0 || v > 0x7FFFFFFF)
        throw Error("tokenize --decode: '" + word + "' on stdin is not a token id");
      ids.push_back(int32_t(v));
    }
    std::cout << tok.decode(ids);
    return 0;
  }
  auto ids = tok.encode(input, args.flag("--special"));
  for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
  std::cout << "\n";
  return 0;
}

MLPT_COMMAND("tokenize", "--tokenizer PATH [--decode] [--special]",
             "text on stdin to token ids (or --decode ids to text)", tokenize);

}  // namespace
}  // namespace mlpt::cli
