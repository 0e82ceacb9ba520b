// Reads the structs and enums an ABI header declares (`typedef struct NAME { ... } NAME;`,
// `typedef enum NAME { ... } NAME;`): each field's name and declared type, comments left out, so
// tests can compare headers with the host's lists and one minor's layouts with the next's. Just
// enough C for abi/: no nested definitions, no bit fields, one declarator per field.
#pragma once

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace abi_test {

struct Field {
  std::string name;
  std::string type;  // tokens joined by one space, parameter names dropped: "mlpt_error * ( * ) (
                     // mlpt_transport * , uint64_t )"
};

struct Header {
  std::map<std::string, std::vector<Field>> structs;  // in declaration order of fields
  std::vector<std::string> struct_order;              // structs in declaration order
  std::set<std::string> enums;
  std::vector<std::string> checked;  // the ids of `[checked: id]` markers, in order
};

inline std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read " + file.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Comments out, each replaced by a space; the `[checked: id]` markers found in them are collected.
inline std::string strip_comments(const std::string& text, std::vector<std::string>* checked) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const bool block = text.compare(i, 2, "/*") == 0, line = text.compare(i, 2, "//") == 0;
    if (!block && !line) {
      out += text[i++];
      continue;
    }
    const size_t end = block ? text.find("*/", i + 2) : text.find('\n', i);
    const size_t stop = end == std::string::npos ? text.size() : end + (block ? 2 : 0);
    std::string comment = text.substr(i, stop - i);
    for (size_t at = comment.find("[checked:"); at != std::string::npos;
         at = comment.find("[checked:", at + 1)) {
      const size_t close = comment.find(']', at);
      std::string id = comment.substr(at + 9, close == std::string::npos ? 0 : close - at - 9);
      std::string trimmed;
      for (char c : id)
        if (!std::isspace(static_cast<unsigned char>(c))) trimmed += c;
      if (checked) checked->push_back(trimmed);
    }
    out += ' ';
    i = stop;
  }
  return out;
}

inline std::vector<std::string> tokens(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (std::isspace(c)) {
      ++i;
    } else if (std::isalnum(c) || c == '_') {
      size_t j = i;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
      out.push_back(text.substr(i, j - i));
      i = j;
    } else {
      out.push_back(std::string(1, text[i++]));
    }
  }
  return out;
}

inline bool is_identifier(const std::string& t) {
  return !t.empty() && (std::isalpha(static_cast<unsigned char>(t[0])) || t[0] == '_');
}

inline std::string join(const std::vector<std::string>& t, size_t from, size_t to) {
  std::string out;
  for (size_t i = from; i < to; ++i) out += (out.empty() ? "" : " ") + t[i];
  return out;
}

// A parameter's type: its name dropped when it has one (a last identifier after a type).
inline std::string parameter_type(std::vector<std::string> t) {
  static const std::set<std::string> qualifiers = {"const", "volatile", "struct",
                                                   "enum",  "unsigned", "signed"};
  size_t type_words = 0;
  for (const auto& w : t) type_words += is_identifier(w) && !qualifiers.count(w);
  if (t.size() > 1 && is_identifier(t.back()) && !qualifiers.count(t.back()) && type_words > 1) t.pop_back();
  return join(t, 0, t.size());
}

// One field declaration (without its ';').
inline Field parse_field(const std::vector<std::string>& t) {
  // A function pointer: ... ( * name ) ( params )
  for (size_t i = 0; i + 3 < t.size(); ++i) {
    if (t[i] == "(" && t[i + 1] == "*" && is_identifier(t[i + 2]) && t[i + 3] == ")") {
      std::string type = join(t, 0, i) + " ( * ) (";
      std::vector<std::string> param;
      bool first = true;
      for (size_t j = i + 5; j < t.size(); ++j) {
        if (t[j] == "," || t[j] == ")") {
          type += (first ? " " : " , ") + parameter_type(param);
          first = false;
          param.clear();
        } else {
          param.push_back(t[j]);
        }
      }
      return Field{t[i + 2], type + " )"};
    }
  }
  size_t name_at = t.size() - 1;
  if (t.back() == "]") name_at = static_cast<size_t>(std::find(t.begin(), t.end(), "[") - t.begin()) - 1;
  Field f{t[name_at], join(t, 0, name_at)};
  if (name_at + 1 < t.size()) f.type += " " + join(t, name_at + 1, t.size());
  return f;
}

inline void parse_into(const std::string& text, Header& h) {
  const std::vector<std::string> t = tokens(strip_comments(text, &h.checked));
  for (size_t i = 0; i + 3 < t.size(); ++i) {
    if (t[i] != "typedef" || (t[i + 1] != "struct" && t[i + 1] != "enum") || t[i + 3] != "{") continue;
    const std::string name = t[i + 2];
    size_t j = i + 4;
    if (t[i + 1] == "enum") {
      h.enums.insert(name);
      continue;
    }
    std::vector<Field> fields;
    std::vector<std::string> decl;
    int depth = 0;
    for (; j < t.size() && !(depth == 0 && t[j] == "}"); ++j) {
      if (t[j] == "(") ++depth;
      if (t[j] == ")") --depth;
      if (depth == 0 && t[j] == ";") {
        if (!decl.empty()) fields.push_back(parse_field(decl));
        decl.clear();
      } else {
        decl.push_back(t[j]);
      }
    }
    h.structs[name] = fields;
    h.struct_order.push_back(name);
    i = j;
  }
}

// Every header of one version: `<dir>/mlpt/*.h`.
inline Header parse_headers(const std::filesystem::path& dir,
                            std::vector<std::filesystem::path>* files = nullptr) {
  std::vector<std::filesystem::path> found;
  for (const auto& e : std::filesystem::directory_iterator(dir / "mlpt"))
    if (e.path().extension() == ".h") found.push_back(e.path());
  std::sort(found.begin(), found.end());
  Header h;
  for (const auto& f : found) parse_into(read_text(f), h);
  if (files) *files = found;
  return h;
}

inline Header parse_header(const std::filesystem::path& file) {
  Header h;
  parse_into(read_text(file), h);
  return h;
}

}  // namespace abi_test
