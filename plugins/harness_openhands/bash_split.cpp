// A scanner, not a bash parser: it follows quotes, expansions, heredocs and compound commands far
// enough to know where a top-level command ends, and gives up (one command: the call runs whole)
// where OpenHands' parser gives up: an unterminated quote, expansion, heredoc or compound command,
// a misplaced reserved word or redirection, and the syntax that parser does not implement
// (`case`, `select`, `coproc`, `time`, `[[`, `$((`, `$[`, array assignments, quoted heredoc
// delimiters). Recorded upstream splits of these cases are in the harness tests.
#include "bash_split.hpp"

#include <string_view>

#include "text_util.hpp"

namespace mlpt::openhands {

namespace {

struct GiveUp {};  // the call is one command

bool is_blank(char c) {
  return c == ' ' || c == '\t';
}
bool is_meta(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == ';' || c == '&' || c == '|' || c == '(' || c == ')' ||
         c == '<' || c == '>';
}

class Scanner {
 public:
  explicit Scanner(std::string_view s) : s_(s) {}

  // Where each top-level command starts.
  std::vector<size_t> command_starts() {
    shell_level(Level::kTop);
    return starts_;
  }

 private:
  enum class Level { kTop, kSubstitution, kBacktick };
  struct Heredoc {
    std::string delimiter;
    bool strip_tabs;
  };

  char at(size_t i) const { return i < s_.size() ? s_[i] : '\0'; }

  // Commands until the level's end: ')' of `$(`/`<(`, '`' of a backquote, or the end of the text.
  void shell_level(Level level) {
    std::vector<std::string> closers;  // "fi", "done", "}", ")" of the open compound commands
    bool command_position = true, continued = false, redirect = false, in_command = false;
    bool expect_function_name = false;
    bool empty = true;  // no command yet since the last operator: another operator here is an error
    auto begin_token = [&] {
      if (level == Level::kTop && !in_command) starts_.push_back(i_);
      in_command = true;
    };
    auto keyword = [&](const std::string& w) {
      if (w == "case" || w == "select" || w == "coproc" || w == "time" || w == "[[") throw GiveUp{};
      auto close = [&](const char* expected) {
        if (closers.empty() || closers.back() != expected) throw GiveUp{};
      };
      empty = !(w == "fi" || w == "done" || w == "}");
      if (w == "if")
        closers.push_back("fi");
      else if (w == "while" || w == "until")
        closers.push_back("done");
      else if (w == "for")
        closers.push_back("done"), command_position = false;
      else if (w == "then" || w == "else" || w == "elif")
        close("fi");
      else if (w == "do")
        close("done");
      else if (w == "fi" || w == "done" || w == "}")
        close(w.c_str()), closers.pop_back(), command_position = false;
      else if (w == "{")
        closers.push_back("}");
      else if (w == "function")
        expect_function_name = true, command_position = false;
      else if (w != "!")
        return false;
      return true;
    };
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (is_blank(c)) {
        ++i_;
        continue;
      }
      if (c == '\\' && at(i_ + 1) == '\n') {
        i_ += 2;
        continue;
      }
      if (c == '\n') {
        if (redirect) throw GiveUp{};
        if (!closers.empty() || continued || level != Level::kTop)
          command_position = true;
        else if (in_command)
          in_command = false, command_position = true, empty = true;
        ++i_;
        read_heredoc_bodies();
        continue;
      }
      if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
        continue;
      }
      if (c == ')') {
        if (!closers.empty() && closers.back() == ")") {
          if (empty) throw GiveUp{};
          closers.pop_back();
          command_position = false, empty = false;
          ++i_;
          continue;
        }
        if (level == Level::kSubstitution && closers.empty() && !continued && !redirect) {
          ++i_;
          return;
        }
        throw GiveUp{};
      }
      if (c == '`' && level == Level::kBacktick) {
        if (!closers.empty() || continued || redirect) throw GiveUp{};
        ++i_;
        return;
      }
      begin_token();
      if (c == ';') {
        if (at(i_ + 1) == ';' || redirect || empty) throw GiveUp{};
        command_position = true, continued = false, empty = true, ++i_;
        continue;
      }
      if (c == '&' || c == '|') {
        if (redirect) throw GiveUp{};
        if (c == '&' && at(i_ + 1) == '>') {  // &> and &>> redirect both streams
          i_ += at(i_ + 2) == '>' ? 3 : 2;
          redirect = true;
          continue;
        }
        if (empty) throw GiveUp{};
        const bool two = at(i_ + 1) == c || (c == '|' && at(i_ + 1) == '&');
        continued = c == '|' || two;  // a lone '&' ends a command as ';' does
        command_position = true, empty = true;
        i_ += two ? 2 : 1;
        continue;
      }
      if (c == '(') {
        if (!command_position) {
          // name() starts a function definition; any other '(' here is a syntax error.
          size_t j = i_ + 1;
          while (is_blank(at(j))) ++j;
          if (at(j) != ')') throw GiveUp{};
          i_ = j + 1, command_position = true;
          continue;
        }
        closers.push_back(")"), empty = true, ++i_;
        continue;
      }
      if (c == '<' || c == '>') {
        if (at(i_ + 1) == '(') {  // process substitution, also as a redirection's target
          i_ += 2;
          shell_level(Level::kSubstitution);
          command_position = false, redirect = false, empty = false;
          continue;
        }
        if (redirect) throw GiveUp{};
        if (c == '<' && at(i_ + 1) == '<' && at(i_ + 2) != '<') {
          i_ += 2;
          read_heredoc_start();
          continue;
        }
        ++i_;
        while (at(i_) == '<' || at(i_) == '>' || at(i_) == '&' || at(i_) == '|') ++i_;
        redirect = true;
        continue;
      }
      // A word.
      const size_t word_start = i_;
      const bool quoted = read_word(level);
      const std::string w(s_.substr(word_start, i_ - word_start));
      continued = false;
      if (redirect) {
        redirect = false, empty = false;
        continue;
      }
      if (expect_function_name) {
        // function NAME [()] BODY
        size_t j = i_;
        while (is_blank(at(j))) ++j;
        if (at(j) == '(') {
          ++j;
          while (is_blank(at(j))) ++j;
          if (at(j) != ')') throw GiveUp{};
          i_ = j + 1;
        }
        expect_function_name = false, command_position = true;
        continue;
      }
      if (command_position && !quoted && keyword(w)) continue;
      empty = false;
      // An array assignment (NAME=(...)) is not implemented upstream.
      if (!quoted && !w.empty() && w.back() == '=' && at(i_) == '(') throw GiveUp{};
      command_position = false;
    }
    if (level != Level::kTop || !closers.empty() || continued || redirect || !heredocs_.empty())
      throw GiveUp{};
  }

  // One word, its quotes and expansions included; returns whether any part of it was quoted.
  bool read_word(Level level) {
    bool quoted = false;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (is_meta(c)) break;
      if (c == '`' && level == Level::kBacktick) break;
      if (c == '\\') {
        // A backquote escaped inside backquotes (nesting) is not implemented upstream.
        if (i_ + 1 >= s_.size() || (level == Level::kBacktick && s_[i_ + 1] == '`')) throw GiveUp{};
        quoted = true, i_ += 2;
        continue;
      }
      if (c == '\'') {
        size_t end = s_.find('\'', i_ + 1);
        if (end == std::string_view::npos) throw GiveUp{};
        quoted = true, i_ = end + 1;
        continue;
      }
      if (c == '"') {
        ++i_;
        double_quoted();
        quoted = true;
        continue;
      }
      if (c == '`') {
        ++i_;
        shell_level(Level::kBacktick);
        quoted = true;
        continue;
      }
      if (c == '$') {
        dollar();
        quoted = true;
        continue;
      }
      ++i_;
    }
    return quoted;
  }

  // After a '$': `$(`, `${`, `$'` and the forms upstream does not implement.
  void dollar() {
    const char n = at(i_ + 1);
    if (n == '(') {
      if (at(i_ + 2) == '(') throw GiveUp{};  // $(( arithmetic ))
      i_ += 2;
      shell_level(Level::kSubstitution);
    } else if (n == '[') {
      throw GiveUp{};  // $[ arithmetic ]
    } else if (n == '{') {
      i_ += 2;
      parameter();
    } else if (n == '\'') {
      for (i_ += 2; i_ < s_.size() && s_[i_] != '\''; ++i_)
        if (s_[i_] == '\\') ++i_;
      if (i_ >= s_.size()) throw GiveUp{};
      ++i_;
    } else {
      ++i_;
    }
  }

  // Inside "...", after the opening quote.
  void double_quoted() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '"') {
        ++i_;
        return;
      }
      if (c == '\\') {
        i_ += 2;
        continue;
      }
      if (c == '`') {
        ++i_, shell_level(Level::kBacktick);
        continue;
      }
      if (c == '$') {
        dollar();
        continue;
      }
      ++i_;
    }
    throw GiveUp{};
  }

  // Inside ${...}, after the opening brace.
  void parameter() {
    int depth = 1;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '}' && --depth == 0) {
        ++i_;
        return;
      }
      if (c == '{')
        ++depth, ++i_;
      else if (c == '\\')
        i_ += 2;
      else if (c == '\'') {
        size_t end = s_.find('\'', i_ + 1);
        if (end == std::string_view::npos) throw GiveUp{};
        i_ = end + 1;
      } else if (c == '"')
        ++i_, double_quoted();
      else if (c == '`')
        ++i_, shell_level(Level::kBacktick);
      else if (c == '$')
        dollar();
      else
        ++i_;
    }
    throw GiveUp{};
  }

  // After "<<": the optional '-' and the delimiter word; its body follows the line.
  void read_heredoc_start() {
    const bool strip_tabs = at(i_) == '-';
    if (strip_tabs) ++i_;
    while (is_blank(at(i_))) ++i_;
    const size_t start = i_;
    while (i_ < s_.size() && !is_meta(s_[i_])) {
      // Quoted delimiters (<<'EOF', <<"EOF", <<\EOF) are not implemented upstream.
      if (s_[i_] == '\'' || s_[i_] == '"' || s_[i_] == '\\' || s_[i_] == '$' || s_[i_] == '`') throw GiveUp{};
      ++i_;
    }
    if (i_ == start) throw GiveUp{};
    heredocs_.push_back({std::string(s_.substr(start, i_ - start)), strip_tabs});
  }

  // At the start of a line: the bodies of the heredocs opened on the line before, in order.
  void read_heredoc_bodies() {
    for (const Heredoc& h : heredocs_) {
      while (true) {
        if (i_ >= s_.size()) throw GiveUp{};
        size_t nl = s_.find('\n', i_);
        std::string_view line =
            s_.substr(i_, nl == std::string_view::npos ? std::string_view::npos : nl - i_);
        i_ = nl == std::string_view::npos ? s_.size() : nl + 1;
        if (h.strip_tabs)
          while (!line.empty() && line.front() == '\t') line.remove_prefix(1);
        if (line == h.delimiter) break;
      }
    }
    heredocs_.clear();
  }

  std::string_view s_;
  size_t i_ = 0;
  std::vector<size_t> starts_;
  std::vector<Heredoc> heredocs_;
};

}  // namespace

std::vector<std::string> split_bash_commands(const std::string& command) {
  if (command.find_first_not_of(" \t\n\r\f\v") == std::string::npos) return {""};
  std::vector<size_t> starts;
  try {
    starts = Scanner(command).command_starts();
  } catch (const GiveUp&) {
    return {command};
  }
  if (starts.empty()) return {std::string(rstrip(command))};
  std::vector<std::string> out;
  // Text before the first command (comment lines) stands as a command of its own, as upstream.
  const std::string_view text(command);
  if (starts[0] > 0 && text.substr(0, starts[0]).find_first_not_of(" \t\n\r\f\v") != std::string_view::npos)
    out.emplace_back(rstrip(text.substr(0, starts[0])));
  for (size_t k = 0; k < starts.size(); ++k) {
    const size_t end = k + 1 < starts.size() ? starts[k + 1] : text.size();
    out.emplace_back(rstrip(text.substr(starts[k], end - starts[k])));
  }
  return out;
}

std::string multiple_commands_error(const std::vector<std::string>& commands) {
  std::string out =
      "ERROR: Cannot execute multiple commands at once.\nPlease run each command separately OR chain them "
      "into a "
      "single command via && or ;\nProvided commands:";
  for (size_t k = 0; k < commands.size(); ++k) out += "\n(" + std::to_string(k + 1) + ") " + commands[k];
  return out;
}

}  // namespace mlpt::openhands
