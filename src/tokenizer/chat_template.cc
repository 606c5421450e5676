#include "tokenizer/chat_template.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>
#include <stdexcept>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "io/gguf.h"

namespace lowbit {
namespace {

using Json = nlohmann::ordered_json;

// Bounds that keep a hostile template (tokenizer_config.json comes from strangers) from overflowing
// the stack or running without end. Real templates nest 3-5 deep and render a few KB.
constexpr int kMaxNesting = 128;
constexpr size_t kMaxOutputBytes = size_t{64} << 20;
constexpr uint64_t kMaxLoopIterations = 100'000;  // a conversation has tens of messages
// Blocks and expressions being evaluated at once, over all macro calls (each call nests a body again).
constexpr int kMaxRenderDepth = 512;

Json Undefined() { return Json(Json::value_t::discarded); }
bool IsUndefined(const Json& v) { return v.is_discarded(); }
constexpr const char* kNamespaceKey = "\x01namespace";

bool Truthy(const Json& v) {
  if (IsUndefined(v) || v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<int64_t>() != 0;
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  if (v.is_object()) return !v.empty() && !(v.size() == 1 && v.contains(kNamespaceKey));
  return !v.empty();
}

// Python's repr of a float: the shortest text that reads back, with ".0" for whole numbers.
std::string PythonFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string JsonString(const std::string& s) { return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace); }

// json.dumps(v, ensure_ascii=False) with Python's default separators, as transformers' tojson.
void DumpPython(const Json& v, int indent, int depth, std::string& out) {
  const auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  if (v.is_object()) {
    if (v.empty()) return void(out += "{}");
    out += '{';
    bool first = true;
    for (const auto& [key, value] : v.items()) {
      if (key == kNamespaceKey) continue;
      if (!first) out += indent >= 0 ? "," : ", ";
      first = false;
      newline(depth + 1);
      out += JsonString(key) + ": ";
      DumpPython(value, indent, depth + 1, out);
    }
    newline(depth);
    out += '}';
  } else if (v.is_array()) {
    if (v.empty()) return void(out += "[]");
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out += indent >= 0 ? "," : ", ";
      newline(depth + 1);
      DumpPython(v[i], indent, depth + 1, out);
    }
    newline(depth);
    out += ']';
  } else if (v.is_number_float()) {
    out += PythonFloat(v.get<double>());
  } else if (IsUndefined(v)) {
    out += "null";
  } else {
    out += v.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

std::string ToText(const Json& v);

// repr() of a list or dict element: strings quoted.
void AppendRepr(const Json& v, std::string& out) {
  if (!v.is_string()) return void(out += ToText(v));
  out += '\'';
  out += v.get_ref<const std::string&>();
  out += '\'';
}

// str(v) as Jinja prints it.
std::string ToText(const Json& v) {
  if (IsUndefined(v)) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_float()) return PythonFloat(v.get<double>());
  if (v.is_number()) return v.dump();
  // Lists and dicts: Python's repr, close enough for templates that print them.
  std::string out;
  if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out += ", ";
      AppendRepr(v[i], out);
    }
    return out + ']';
  }
  out += '{';
  bool first = true;
  for (const auto& [key, value] : v.items()) {
    if (!first) out += ", ";
    first = false;
    AppendRepr(Json(key), out);
    out += ": ";
    AppendRepr(value, out);
  }
  return out + '}';
}

// ---- expressions -------------------------------------------------------------------------------

struct Token {
  enum Kind { kName, kString, kInt, kFloat, kOp, kEnd } kind = kEnd;
  std::string text;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum Kind {
    kLiteral, kName, kList, kDict, kAttr, kItem, kSlice, kCall, kFilter, kTest, kNot, kNeg, kAnd, kOr, kBinary, kCond
  } kind;
  Json literal;
  std::string name;  // name, attribute, filter, test or operator
  std::vector<ExprPtr> args;  // operands; for kDict key, value pairs; for kSlice obj, start, stop, step (null = absent)
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // kTest: `is not`
};

ExprPtr Make(Expr::Kind kind) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  return e;
}

class ExprParser {
 public:
  ExprParser(std::string_view text, std::string where) : text_(text), where_(std::move(where)) { Advance(); }

  [[noreturn]] void Error(std::string_view message) const {
    Fail("{}: {} in '{}'", where_, message, std::string(text_));
  }
  const Token& Peek() const { return token_; }
  bool AtEnd() const { return token_.kind == Token::kEnd; }
  bool IsOp(std::string_view op) const { return token_.kind == Token::kOp && token_.text == op; }
  bool IsName(std::string_view name) const { return token_.kind == Token::kName && token_.text == name; }
  void Expect(std::string_view op) {
    if (!IsOp(op)) Error(fmt::format("expected '{}'", op));
    Advance();
  }
  std::string ExpectName() {
    if (token_.kind != Token::kName) Error("expected a name");
    std::string name = token_.text;
    Advance();
    return name;
  }
  bool Accept(std::string_view op) {
    if (!IsOp(op)) return false;
    Advance();
    return true;
  }
  bool AcceptName(std::string_view name) {
    if (!IsName(name)) return false;
    Advance();
    return true;
  }

  // expression := or ('if' or ('else' expression)?)?
  ExprPtr Expression() {
    ExprPtr value = Or();
    if (IsName("if")) {
      Advance();
      auto e = Make(Expr::kCond);
      ExprPtr cond = Or();
      ExprPtr otherwise = AcceptName("else") ? Expression() : nullptr;
      e->args.push_back(std::move(value));
      e->args.push_back(std::move(cond));
      e->args.push_back(std::move(otherwise));
      return e;
    }
    return value;
  }
  // An expression without the conditional form (for-loop iterables, whose `if` is a filter).
  ExprPtr OrExpression() { return Or(); }

 private:
  void Advance() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    token_ = Token{};
    if (pos_ >= text_.size()) return;
    const char c = text_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = pos_;
      while (end < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[end])) || text_[end] == '_')) ++end;
      token_ = {Token::kName, std::string(text_.substr(pos_, end - pos_))};
      pos_ = end;
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t end = pos_;
      bool is_float = false;
      while (end < text_.size() && (std::isdigit(static_cast<unsigned char>(text_[end])) || text_[end] == '_' ||
                                    (text_[end] == '.' && !is_float && end + 1 < text_.size() &&
                                     std::isdigit(static_cast<unsigned char>(text_[end + 1])))))
        is_float |= text_[end++] == '.';
      token_ = {is_float ? Token::kFloat : Token::kInt, std::string(text_.substr(pos_, end - pos_))};
      std::erase(token_.text, '_');
      pos_ = end;
      return;
    }
    if (c == '\'' || c == '"') {
      std::string s;
      size_t i = pos_ + 1;
      for (; i < text_.size() && text_[i] != c; ++i) {
        if (text_[i] != '\\' || i + 1 >= text_.size()) {
          s += text_[i];
          continue;
        }
        const char e = text_[++i];
        switch (e) {
          case 'n': s += '\n'; break;
          case 't': s += '\t'; break;
          case 'r': s += '\r'; break;
          case '\\': s += '\\'; break;
          case '\'': s += '\''; break;
          case '"': s += '"'; break;
          default: s += '\\', s += e;  // Python keeps unknown escapes as written
        }
      }
      if (i >= text_.size()) Error("unterminated string");
      token_ = {Token::kString, std::move(s)};
      pos_ = i + 1;
      return;
    }
    static constexpr std::string_view kOps[] = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ".",
                                                ",", ":", "|", "~", "+", "-", "*", "/", "%", "<", ">", "="};
    for (const std::string_view op : kOps) {
      if (text_.substr(pos_, op.size()) == op) {
        token_ = {Token::kOp, std::string(op)};
        pos_ += op.size();
        return;
      }
    }
    Error(fmt::format("unexpected character '{}'", c));
  }

  ExprPtr Binary(Expr::Kind kind, ExprPtr a, ExprPtr b, std::string op = {}) {
    auto e = Make(kind);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }
  ExprPtr Or() {
    ExprPtr left = And();
    while (AcceptName("or")) left = Binary(Expr::kOr, std::move(left), And());
    return left;
  }
  ExprPtr And() {
    ExprPtr left = Not();
    while (AcceptName("and")) left = Binary(Expr::kAnd, std::move(left), Not());
    return left;
  }
  // Counts nesting on the recursive paths (parentheses, brackets, prefix operators).
  struct Nest {
    explicit Nest(ExprParser& p) : parser(p) {
      if (++parser.depth_ > kMaxNesting) parser.Error(fmt::format("nested deeper than {} levels", kMaxNesting));
    }
    ~Nest() { --parser.depth_; }
    ExprParser& parser;
  };

  ExprPtr Not() {
    const Nest nest(*this);
    if (AcceptName("not")) {
      auto e = Make(Expr::kNot);
      e->args.push_back(Not());
      return e;
    }
    return Compare();
  }
  ExprPtr Compare() {
    ExprPtr left = Concat();
    for (;;) {
      if (token_.kind == Token::kOp &&
          (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp(">") || IsOp("<=") || IsOp(">="))) {
        const std::string op = token_.text;
        Advance();
        left = Binary(Expr::kBinary, std::move(left), Concat(), op);
      } else if (IsName("in")) {
        Advance();
        left = Binary(Expr::kBinary, std::move(left), Concat(), "in");
      } else if (IsName("not")) {
        Advance();
        if (!AcceptName("in")) Error("expected 'in' after 'not'");
        auto in = Binary(Expr::kBinary, std::move(left), Concat(), "in");
        left = Make(Expr::kNot);
        left->args.push_back(std::move(in));
      } else if (IsName("is")) {
        Advance();
        auto e = Make(Expr::kTest);
        e->negated = AcceptName("not");
        e->name = ExpectName();
        e->args.push_back(std::move(left));
        // A test's argument: `is divisibleby(3)` or `is sameas x` style single operand.
        if (Accept("(")) {
          while (!Accept(")")) {
            e->args.push_back(Expression());
            Accept(",");
          }
        }
        left = std::move(e);
      } else {
        return left;
      }
    }
  }
  ExprPtr Concat() {
    ExprPtr left = Additive();
    while (Accept("~")) left = Binary(Expr::kBinary, std::move(left), Additive(), "~");
    return left;
  }
  ExprPtr Additive() {
    ExprPtr left = Multiplicative();
    while (IsOp("+") || IsOp("-")) {
      const std::string op = token_.text;
      Advance();
      left = Binary(Expr::kBinary, std::move(left), Multiplicative(), op);
    }
    return left;
  }
  ExprPtr Multiplicative() {
    ExprPtr left = Unary();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const std::string op = token_.text;
      Advance();
      left = Binary(Expr::kBinary, std::move(left), Unary(), op);
    }
    return left;
  }
  ExprPtr Unary() {
    const Nest nest(*this);
    if (Accept("-")) {
      auto e = Make(Expr::kNeg);
      e->args.push_back(Unary());
      return e;
    }
    Accept("+");
    return Filtered();
  }
  // postfix ('|' name args?)*
  ExprPtr Filtered() {
    ExprPtr value = Postfix(Primary());
    while (Accept("|")) {
      auto e = Make(Expr::kFilter);
      e->name = ExpectName();
      e->args.push_back(std::move(value));
      if (IsOp("(")) Arguments(*e);
      value = std::move(e);
    }
    return value;
  }
  void Arguments(Expr& call) {
    Expect("(");
    while (!Accept(")")) {
      if (token_.kind == Token::kName) {
        // name=value keyword argument?
        const size_t saved_pos = pos_;
        const Token saved = token_;
        Advance();
        if (IsOp("=")) {
          Advance();
          call.kwargs.emplace_back(saved.text, Expression());
          if (!Accept(",") && !IsOp(")")) Error("expected ',' or ')'");
          continue;
        }
        pos_ = saved_pos;
        token_ = saved;
      }
      call.args.push_back(Expression());
      if (!Accept(",") && !IsOp(")")) Error("expected ',' or ')'");
    }
  }
  ExprPtr Postfix(ExprPtr value) {
    for (;;) {
      if (Accept(".")) {
        auto e = Make(Expr::kAttr);
        e->name = ExpectName();
        e->args.push_back(std::move(value));
        value = std::move(e);
      } else if (Accept("[")) {
        ExprPtr parts[3];
        bool slice = false;
        for (int i = 0; i < 3; ++i) {
          if (!IsOp(":") && !IsOp("]")) parts[i] = Expression();
          if (i < 2 && Accept(":")) {
            slice = true;
            continue;
          }
          break;
        }
        Expect("]");
        auto e = Make(slice ? Expr::kSlice : Expr::kItem);
        e->args.push_back(std::move(value));
        if (!slice && !parts[0]) Error("empty subscript");
        for (int i = 0; i < (slice ? 3 : 1); ++i) e->args.push_back(std::move(parts[i]));
        value = std::move(e);
      } else if (IsOp("(")) {
        auto e = Make(Expr::kCall);
        e->args.push_back(std::move(value));
        Arguments(*e);
        value = std::move(e);
      } else {
        return value;
      }
    }
  }
  ExprPtr Primary() {
    const Nest nest(*this);
    const Token t = token_;
    if (t.kind == Token::kString) {
      Advance();
      std::string s = t.text;
      while (token_.kind == Token::kString) {  // adjacent literals concatenate
        s += token_.text;
        Advance();
      }
      auto e = Make(Expr::kLiteral);
      e->literal = s;
      return e;
    }
    if (t.kind == Token::kInt || t.kind == Token::kFloat) {
      Advance();
      auto e = Make(Expr::kLiteral);
      try {
        if (t.kind == Token::kInt) {
          e->literal = std::stoll(t.text);
        } else {
          e->literal = std::stod(t.text);
        }
      } catch (const std::out_of_range&) {
        Error(fmt::format("number {} is out of range", t.text));
      }
      return e;
    }
    if (t.kind == Token::kName) {
      Advance();
      auto e = Make(Expr::kLiteral);
      if (t.text == "true" || t.text == "True") {
        e->literal = true;
      } else if (t.text == "false" || t.text == "False") {
        e->literal = false;
      } else if (t.text == "none" || t.text == "None") {
        e->literal = nullptr;
      } else {
        e->kind = Expr::kName;
        e->name = t.text;
      }
      return e;
    }
    if (Accept("(")) {
      ExprPtr inner = Expression();
      if (IsOp(",")) {  // a tuple: a list here
        auto list = Make(Expr::kList);
        list->args.push_back(std::move(inner));
        while (Accept(",") && !IsOp(")")) list->args.push_back(Expression());
        inner = std::move(list);
      }
      Expect(")");
      return inner;
    }
    if (Accept("[")) {
      auto e = Make(Expr::kList);
      while (!Accept("]")) {
        e->args.push_back(Expression());
        if (!Accept(",") && !IsOp("]")) Error("expected ',' or ']'");
      }
      return e;
    }
    if (Accept("{")) {
      auto e = Make(Expr::kDict);
      while (!Accept("}")) {
        e->args.push_back(Expression());
        Expect(":");
        e->args.push_back(Expression());
        if (!Accept(",") && !IsOp("}")) Error("expected ',' or '}'");
      }
      return e;
    }
    Error(t.kind == Token::kEnd ? "unexpected end of expression" : fmt::format("unexpected '{}'", t.text));
  }

  std::string_view text_;
  std::string where_;
  size_t pos_ = 0;
  Token token_;
  int depth_ = 0;
};

// ---- template structure ------------------------------------------------------------------------

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum Kind { kText, kOutput, kIf, kFor, kSet, kBreak, kContinue, kMacro } kind;
  std::string text;                                   // kText
  ExprPtr expr;                                       // kOutput, kFor iterable, kSet value
  std::vector<std::pair<ExprPtr, Body>> branches;     // kIf: (condition, body)...
  Body body, else_body;                               // kFor (and kIf's else)
  std::vector<std::string> targets;                   // kFor loop variables; kSet: name [, attribute]; kMacro:
                                                      // name, then its parameters
  ExprPtr filter;                                     // kFor: `for x in xs if cond`
  std::vector<ExprPtr> defaults;                      // kMacro: each parameter's default (null: none)
};

struct Piece {
  enum Kind { kText, kOutput, kTag } kind;
  std::string text;
  size_t offset;  // in the template, for errors
};

class TemplateParser {
 public:
  TemplateParser(std::string_view source, std::string where) : source_(source), where_(std::move(where)) {}

  Body Parse() {
    Split();
    Body body = ParseBody({});
    if (index_ < pieces_.size()) ErrorAt(pieces_[index_], fmt::format("unexpected '{}'", pieces_[index_].text));
    return body;
  }

 private:
  std::string Where(size_t offset) const {
    const size_t line = 1 + static_cast<size_t>(std::count(source_.begin(), source_.begin() + offset, '\n'));
    return fmt::format("{} (line {})", where_, line);
  }
  [[noreturn]] void ErrorAt(const Piece& p, std::string_view message) const {
    Fail("{}: {}", Where(p.offset), message);
  }

  // Cuts the source into text, {{ output }} and {% tag %} pieces, applying '-' whitespace control
  // and transformers' trim_blocks / lstrip_blocks.
  void Split() {
    size_t pos = 0;
    std::string text;
    bool strip_next = false;  // the previous tag ended with '-'
    bool trim_newline = false;  // the previous tag was a block tag (trim_blocks)
    const auto flush = [&] {
      if (!text.empty()) pieces_.push_back({Piece::kText, std::move(text), pos});
      text.clear();
    };
    while (pos < source_.size()) {
      size_t start = pos;  // the next "{{", "{%" or "{#"
      for (;;) {
        start = source_.find('{', start);
        if (start == std::string_view::npos || start + 1 >= source_.size()) {
          start = std::string_view::npos;
          break;
        }
        const char next = source_[start + 1];
        if (next == '{' || next == '%' || next == '#') break;
        ++start;
      }
      std::string piece(source_.substr(pos, start == std::string_view::npos ? std::string_view::npos : start - pos));
      if (strip_next) {
        const size_t keep = piece.find_first_not_of(" \t\r\n");
        piece.erase(0, keep == std::string::npos ? piece.size() : keep);
      } else if (trim_newline) {
        if (piece.starts_with("\r\n")) {
          piece.erase(0, 2);
        } else if (piece.starts_with('\n')) {
          piece.erase(0, 1);
        }
      }
      strip_next = trim_newline = false;
      if (start == std::string_view::npos) {
        text += piece;
        break;
      }
      const char type = source_[start + 1];
      const bool minus = start + 2 < source_.size() && source_[start + 2] == '-';
      const bool plus = start + 2 < source_.size() && source_[start + 2] == '+';
      if (minus) {
        const size_t keep = piece.find_last_not_of(" \t\r\n");
        piece.resize(keep == std::string::npos ? 0 : keep + 1);
      } else if (type != '{' && !plus) {
        // lstrip_blocks: spaces and tabs from the start of the line up to a block tag go.
        const size_t newline = start == 0 ? std::string_view::npos : source_.rfind('\n', start - 1);
        const size_t line_start = newline == std::string_view::npos ? 0 : newline + 1;
        if (line_start >= pos && source_.find_first_not_of(" \t", line_start) >= start) {
          const size_t n = start - line_start;
          piece.resize(piece.size() >= n ? piece.size() - n : 0);
        }
      }
      text += piece;
      const std::string_view close = type == '{' ? "}}" : type == '%' ? "%}" : "#}";
      const size_t body_start = start + 2 + (minus || plus ? 1 : 0);
      const size_t end = FindClose(body_start, close, type == '#');
      if (end == std::string_view::npos)
        Fail("{}: '{}{}' is never closed", Where(start), '{', type);
      size_t body_end = end;
      if (body_end > body_start && source_[body_end - 1] == '-') {
        strip_next = true;
        --body_end;
      } else if (body_end > body_start && source_[body_end - 1] == '+') {
        --body_end;
      } else {
        trim_newline = type != '{';
      }
      if (type != '#') {
        flush();
        std::string inner(source_.substr(body_start, body_end - body_start));
        pieces_.push_back({type == '{' ? Piece::kOutput : Piece::kTag, std::move(inner), start});
      }
      pos = end + 2;
    }
    flush();
  }
  // The closing delimiter, skipping quoted strings inside expressions.
  size_t FindClose(size_t from, std::string_view close, bool comment) const {
    if (comment) return source_.find(close, from);
    char quote = 0;
    for (size_t i = from; i + 1 < source_.size(); ++i) {
      const char c = source_[i];
      if (quote) {
        if (c == '\\') ++i;
        else if (c == quote) quote = 0;
      } else if (c == '\'' || c == '"') {
        quote = c;
      } else if (source_.substr(i, close.size()) == close) {
        return i;
      }
    }
    return std::string_view::npos;
  }

  static std::string FirstWord(const std::string& tag) {
    const size_t begin = tag.find_first_not_of(" \t\r\n");
    if (begin == std::string::npos) return {};
    size_t end = begin;
    while (end < tag.size() && (std::isalnum(static_cast<unsigned char>(tag[end])) || tag[end] == '_')) ++end;
    return tag.substr(begin, end - begin);
  }

  // Parses pieces into nodes until a tag whose first word is in `until` (left unconsumed).
  Body ParseBody(const std::vector<std::string_view>& until) {
    if (until.size() > 0 && ++depth_ > kMaxNesting) Fail("{}: blocks nested deeper than {} levels", where_, kMaxNesting);
    struct Leave {
      int& depth;
      bool counted;
      ~Leave() { depth -= counted; }
    } leave{depth_, !until.empty()};
    Body body;
    while (index_ < pieces_.size()) {
      const Piece& p = pieces_[index_];
      if (p.kind == Piece::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::kText;
        n->text = p.text;
        body.push_back(std::move(n));
        ++index_;
        continue;
      }
      if (p.kind == Piece::kOutput) {
        ExprParser parser(p.text, Where(p.offset));
        auto n = std::make_unique<Node>();
        n->kind = Node::kOutput;
        n->expr = parser.Expression();
        if (!parser.AtEnd()) parser.Error("unexpected text after the expression");
        body.push_back(std::move(n));
        ++index_;
        continue;
      }
      const std::string word = FirstWord(p.text);
      if (std::find(until.begin(), until.end(), word) != until.end()) return body;
      ++index_;
      ExprParser parser(std::string_view(p.text).substr(p.text.find(word) + word.size()), Where(p.offset));
      auto n = std::make_unique<Node>();
      if (word == "if") {
        n->kind = Node::kIf;
        ExprPtr cond = parser.Expression();
        End(parser, p);
        for (;;) {
          Body branch = ParseBody({"elif", "else", "endif"});
          n->branches.emplace_back(std::move(cond), std::move(branch));
          const Piece& next = Next(p, "endif");
          const std::string next_word = FirstWord(next.text);
          ++index_;
          if (next_word == "endif") break;
          if (next_word == "else") {
            n->else_body = ParseBody({"endif"});
            Next(p, "endif");
            ++index_;
            break;
          }
          ExprParser elif(std::string_view(next.text).substr(next.text.find("elif") + 4), Where(next.offset));
          cond = elif.Expression();
          End(elif, next);
        }
      } else if (word == "for") {
        n->kind = Node::kFor;
        n->targets.push_back(parser.ExpectName());
        while (parser.Accept(",")) n->targets.push_back(parser.ExpectName());
        if (!parser.AcceptName("in")) parser.Error("expected 'in'");
        n->expr = parser.OrExpression();
        if (parser.AcceptName("if")) n->filter = parser.OrExpression();
        if (parser.AcceptName("recursive")) ErrorAt(p, "recursive loops are not supported");
        End(parser, p);
        n->body = ParseBody({"else", "endfor"});
        if (FirstWord(Next(p, "endfor").text) == "else") {
          ++index_;
          n->else_body = ParseBody({"endfor"});
          Next(p, "endfor");
        }
        ++index_;
      } else if (word == "set") {
        n->kind = Node::kSet;
        n->targets.push_back(parser.ExpectName());
        if (parser.Accept(".")) n->targets.push_back(parser.ExpectName());
        if (!parser.Accept("=")) ErrorAt(p, "block assignments ({% set x %}...{% endset %}) are not supported");
        n->expr = parser.Expression();
        End(parser, p);
      } else if (word == "macro") {  // {% macro name(a, b=default) %}...{% endmacro %}
        n->kind = Node::kMacro;
        n->targets.push_back(parser.ExpectName());
        parser.Expect("(");
        while (!parser.Accept(")")) {
          if (n->targets.size() > 1) parser.Expect(",");
          n->targets.push_back(parser.ExpectName());
          n->defaults.push_back(parser.Accept("=") ? parser.Expression() : nullptr);
        }
        End(parser, p);
        n->body = ParseBody({"endmacro"});
        Next(p, "endmacro");
        ++index_;
      } else if (word == "break" || word == "continue") {
        n->kind = word == "break" ? Node::kBreak : Node::kContinue;
        End(parser, p);
      } else {
        ErrorAt(p, fmt::format("'{{% {} %}}' is not supported (if, for, set, macro, break, continue are)", word));
      }
      body.push_back(std::move(n));
    }
    if (!until.empty()) Fail("{}: missing '{{% {} %}}'", where_, until.back());
    return body;
  }
  void End(ExprParser& parser, const Piece& p) const {
    if (!parser.AtEnd()) ErrorAt(p, fmt::format("unexpected text in '{{% {} %}}'", p.text));
  }
  const Piece& Next(const Piece& opener, std::string_view closer) const {
    if (index_ >= pieces_.size()) ErrorAt(opener, fmt::format("'{{% {} %}}' is never closed by '{{% {} %}}'", opener.text, closer));
    return pieces_[index_];
  }

  std::string_view source_;
  std::string where_;
  std::vector<Piece> pieces_;
  size_t index_ = 0;
  int depth_ = 0;
};

// ---- evaluation --------------------------------------------------------------------------------

class Renderer {
 public:
  Renderer(const Json& context, std::string where) : where_(std::move(where)) {
    scopes_.emplace_back();
    for (const auto& [key, value] : context.items()) scopes_.back()[key] = value;
  }

  void Run(const Body& body, std::string& out) {
    if (Exec(body, out) != Flow::kNormal) Error("'break' or 'continue' outside a loop");
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  [[noreturn]] void Error(std::string_view message) const { Fail("{}: {}", where_, message); }

  // A name in the current frame's scopes, innermost first, then at the top level (a macro does not see its
  // caller's locals).
  Json* Find(const std::string& name) {
    for (size_t i = scopes_.size(); i-- > frame_;)
      if (auto found = scopes_[i].find(name); found != scopes_[i].end()) return &found->second;
    if (frame_ > 0)
      if (auto found = scopes_[0].find(name); found != scopes_[0].end()) return &found->second;
    return nullptr;
  }

  // Counts a level of evaluation while alive: macros nest bodies and expressions inside one another, so their
  // total depth, not each template construct's, bounds the stack.
  struct Nested {
    explicit Nested(Renderer& r) : renderer(r) {
      if (++renderer.render_depth_ > kMaxRenderDepth)
        renderer.Error(fmt::format("evaluation nested deeper than {} levels", kMaxRenderDepth));
    }
    ~Nested() { --renderer.render_depth_; }
    Renderer& renderer;
  };

  Flow Exec(const Body& body, std::string& out) {
    const Nested nested(*this);
    for (const auto& node : body) {
      switch (node->kind) {
        case Node::kText:
          out += node->text;
          CheckSize(out);
          break;
        case Node::kOutput:
          out += ToText(Eval(*node->expr));
          CheckSize(out);
          break;
        case Node::kIf: {
          bool taken = false;
          for (const auto& [cond, branch] : node->branches) {
            if (Truthy(Eval(*cond))) {
              taken = true;
              if (const Flow f = Exec(branch, out); f != Flow::kNormal) return f;
              break;
            }
          }
          if (!taken)
            if (const Flow f = Exec(node->else_body, out); f != Flow::kNormal) return f;
          break;
        }
        case Node::kFor:
          ExecFor(*node, out);
          break;
        case Node::kSet: {
          Json value = Eval(*node->expr);
          if (node->targets.size() == 1) {
            scopes_.back()[node->targets[0]] = std::move(value);
          } else {
            Json* ns = Find(node->targets[0]);
            if (ns == nullptr || !ns->is_object() || !ns->contains(kNamespaceKey))
              Error(fmt::format("'{}' is not a namespace()", node->targets[0]));
            (*ns)[node->targets[1]] = std::move(value);
          }
          break;
        }
        case Node::kMacro:
          macros_[node->targets[0]] = node.get();
          break;
        case Node::kBreak:
          return Flow::kBreak;
        case Node::kContinue:
          return Flow::kContinue;
      }
    }
    return Flow::kNormal;
  }

  void ExecFor(const Node& node, std::string& out) {
    const Json iterable = Eval(*node.expr);
    std::vector<Json> items;
    if (iterable.is_array()) {
      items.assign(iterable.begin(), iterable.end());
    } else if (iterable.is_object()) {
      for (const auto& [key, value] : iterable.items())
        if (key != kNamespaceKey) items.emplace_back(key);
    } else if (iterable.is_string()) {
      for (const char c : iterable.get<std::string>()) items.emplace_back(std::string(1, c));
    } else if (!IsUndefined(iterable) && !iterable.is_null()) {
      Error(fmt::format("cannot loop over {}", ToText(iterable)));
    }
    scopes_.emplace_back();
    const auto bind = [&](const Json& item) {
      if (node.targets.size() == 1) {
        scopes_.back()[node.targets[0]] = item;
        return;
      }
      if (!item.is_array() || item.size() != node.targets.size())
        Error(fmt::format("cannot unpack {} into {} names", ToText(item), node.targets.size()));
      for (size_t i = 0; i < node.targets.size(); ++i) scopes_.back()[node.targets[i]] = item[i];
    };
    if (node.filter) {
      std::vector<Json> kept;
      for (const Json& item : items) {
        bind(item);
        if (Truthy(Eval(*node.filter))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    for (size_t i = 0; i < items.size(); ++i) {
      bind(items[i]);
      const auto n = static_cast<int64_t>(items.size()), k = static_cast<int64_t>(i);
      Json loop = {{"index0", k}, {"index", k + 1}, {"revindex", n - k}, {"revindex0", n - k - 1},
                   {"first", i == 0}, {"last", i + 1 == items.size()}, {"length", n}};
      loop["previtem"] = i > 0 ? items[i - 1] : Undefined();
      loop["nextitem"] = i + 1 < items.size() ? items[i + 1] : Undefined();
      scopes_.back()["loop"] = std::move(loop);
      if (++iterations_ > kMaxLoopIterations) Error(fmt::format("more than {} loop iterations", kMaxLoopIterations));
      if (Exec(node.body, out) == Flow::kBreak) break;
    }
    scopes_.pop_back();
    if (items.empty()) Exec(node.else_body, out);
  }

  // An integer operand (slice bounds, range arguments): anything else is an Error, as in Python.
  int64_t Int(const Json& v, std::string_view what) const {
    if (!v.is_number_integer()) Error(fmt::format("{} must be an integer, not {}", what, IsUndefined(v) ? "undefined" : ToText(v)));
    return v.get<int64_t>();
  }

  static int64_t Index(int64_t i, size_t size) { return i < 0 ? i + static_cast<int64_t>(size) : i; }

  Json Item(const Json& obj, const Json& key) {
    if (obj.is_object()) {
      if (!key.is_string()) return Undefined();
      const auto it = obj.find(key.get<std::string>());
      return it == obj.end() ? Undefined() : *it;
    }
    if ((obj.is_array() || obj.is_string()) && key.is_number_integer()) {
      const size_t size = obj.is_array() ? obj.size() : obj.get_ref<const std::string&>().size();
      const int64_t i = Index(key.get<int64_t>(), size);
      if (i < 0 || i >= static_cast<int64_t>(size)) return Undefined();
      return obj.is_array() ? obj[static_cast<size_t>(i)] : Json(std::string(1, obj.get<std::string>()[static_cast<size_t>(i)]));
    }
    return Undefined();
  }

  Json Slice(const Json& obj, const Json& start, const Json& stop, const Json& step_value) {
    const bool is_string = obj.is_string();
    if (!is_string && !obj.is_array()) Error("only strings and lists can be sliced");
    const auto n = static_cast<int64_t>(is_string ? obj.get_ref<const std::string&>().size() : obj.size());
    const int64_t step = step_value.is_null() ? 1 : Int(step_value, "a slice step");
    if (step == 0) Error("slice step cannot be zero");
    const auto bound = [&](const Json& v, int64_t fallback) {
      if (v.is_null()) return fallback;
      int64_t i = Int(v, "a slice bound");
      if (i < 0) i += n;
      return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t from = bound(start, step > 0 ? 0 : n - 1), to = bound(stop, step > 0 ? n : -1);
    Json out = is_string ? Json("") : Json::array();
    for (int64_t i = from; step > 0 ? i < to : i > to;) {
      if (is_string) {
        out.get_ref<std::string&>() += obj.get_ref<const std::string&>()[static_cast<size_t>(i)];
      } else {
        out.push_back(obj[static_cast<size_t>(i)]);
      }
      if (__builtin_add_overflow(i, step, &i)) break;
    }
    return out;
  }

  Json Eval(const Expr& e) {
    const Nested nested(*this);
    switch (e.kind) {
      case Expr::kLiteral:
        return e.literal;
      case Expr::kName: {
        const Json* v = Find(e.name);
        return v ? *v : Undefined();
      }
      case Expr::kList: {
        Json out = Json::array();
        for (const auto& a : e.args) out.push_back(Eval(*a));
        return out;
      }
      case Expr::kDict: {
        Json out = Json::object();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) out[ToText(Eval(*e.args[i]))] = Eval(*e.args[i + 1]);
        return out;
      }
      case Expr::kAttr: {
        const Json obj = Eval(*e.args[0]);
        return obj.is_object() && obj.contains(e.name) ? obj[e.name] : Undefined();
      }
      case Expr::kItem:
        return Item(Eval(*e.args[0]), Eval(*e.args[1]));
      case Expr::kSlice: {
        const auto part = [&](size_t i) { return e.args[i] ? Eval(*e.args[i]) : Json(nullptr); };
        return Slice(Eval(*e.args[0]), part(1), part(2), part(3));
      }
      case Expr::kCall:
        return Call(e);
      case Expr::kFilter:
        return Filter(e);
      case Expr::kTest: {
        const bool result = Test(e);
        return e.negated ? !result : result;
      }
      case Expr::kNot:
        return !Truthy(Eval(*e.args[0]));
      case Expr::kNeg: {
        const Json v = Eval(*e.args[0]);
        if (v.is_number_integer() && v.get<int64_t>() != std::numeric_limits<int64_t>::min()) return -v.get<int64_t>();
        if (v.is_number()) return -v.get<double>();
        Error("unary '-' needs a number");
      }
      case Expr::kAnd: {
        Json a = Eval(*e.args[0]);
        return Truthy(a) ? Eval(*e.args[1]) : a;
      }
      case Expr::kOr: {
        Json a = Eval(*e.args[0]);
        return Truthy(a) ? a : Eval(*e.args[1]);
      }
      case Expr::kCond:
        if (Truthy(Eval(*e.args[1]))) return Eval(*e.args[0]);
        return e.args[2] ? Eval(*e.args[2]) : Undefined();
      case Expr::kBinary:
        return BinaryOp(e.name, Eval(*e.args[0]), Eval(*e.args[1]));
    }
    Error("unknown expression");
  }

  Json BinaryOp(const std::string& op, const Json& a, const Json& b) {
    if (op == "==") return Equal(a, b);
    if (op == "!=") return !Equal(a, b);
    if (op == "~") {
      std::string joined = ToText(a) + ToText(b);
      CheckSize(joined);
      return joined;
    }
    if (op == "in") {
      if (b.is_string()) return a.is_string() && b.get<std::string>().find(a.get<std::string>()) != std::string::npos;
      if (b.is_array()) return std::any_of(b.begin(), b.end(), [&](const Json& x) { return Equal(x, a); });
      if (b.is_object()) return a.is_string() && b.contains(a.get<std::string>());
      if (IsUndefined(b) || b.is_null()) return false;
      Error("'in' needs a string, list or dict on its right");
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        std::string joined = a.get<std::string>() + b.get<std::string>();
        CheckSize(joined);
        return joined;
      }
      if (a.is_array() && b.is_array()) {
        if (a.size() + b.size() > kMaxOutputBytes / 64) Error("a list grew past a million items");
        Json out = a;
        out.insert(out.end(), b.begin(), b.end());
        return out;
      }
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp = 0;
      if (a.is_string() && b.is_string()) {
        cmp = a.get<std::string>().compare(b.get<std::string>());
      } else if (a.is_number() && b.is_number()) {
        const double x = a.get<double>(), y = b.get<double>();
        cmp = x < y ? -1 : x > y ? 1 : 0;
      } else {
        Error(fmt::format("cannot compare {} and {} with '{}'", ToText(a), ToText(b), op));
      }
      return op == "<" ? cmp < 0 : op == ">" ? cmp > 0 : op == "<=" ? cmp <= 0 : cmp >= 0;
    }
    if (!a.is_number() || !b.is_number())
      Error(fmt::format("'{}' needs numbers (or strings / lists for '+'), not {} and {}", op, ToText(a), ToText(b)));
    const bool ints = a.is_number_integer() && b.is_number_integer();
    if (ints && op != "/") {
      const int64_t x = a.get<int64_t>(), y = b.get<int64_t>();
      if ((op == "//" || op == "%") && y == 0) Error("division by zero");
      int64_t r = 0;
      // Python's integers do not overflow; 64 bits are plenty for templates, so overflow is an Error.
      if ((op == "+" && __builtin_add_overflow(x, y, &r)) || (op == "-" && __builtin_sub_overflow(x, y, &r)) ||
          (op == "*" && __builtin_mul_overflow(x, y, &r)) ||
          ((op == "//" || op == "%") && x == std::numeric_limits<int64_t>::min() && y == -1))
        Error(fmt::format("integer overflow in {} {} {}", x, op, y));
      if (op == "+" || op == "-" || op == "*") return r;
      const int64_t q = x / y - ((x % y != 0) && ((x < 0) != (y < 0)) ? 1 : 0);  // Python floors
      if (op == "//") return q;
      if (op == "%") return x - q * y;
    }
    const double x = a.get<double>(), y = b.get<double>();
    if (op == "+") return x + y;
    if (op == "-") return x - y;
    if (op == "*") return x * y;
    if (y == 0) Error("division by zero");
    if (op == "/") return x / y;
    if (op == "//") return std::floor(x / y);
    if (op == "%") return x - std::floor(x / y) * y;
    Error(fmt::format("unknown operator '{}'", op));
  }

  static bool Equal(const Json& a, const Json& b) {
    if (IsUndefined(a) || IsUndefined(b)) return IsUndefined(a) && IsUndefined(b);
    if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
    return a == b;
  }

  std::vector<Json> Args(const Expr& e, size_t first) {
    std::vector<Json> out;
    for (size_t i = first; i < e.args.size(); ++i) out.push_back(Eval(*e.args[i]));
    return out;
  }
  Json Kwarg(const Expr& e, std::string_view name, Json fallback) {
    for (const auto& [key, value] : e.kwargs)
      if (key == name) return Eval(*value);
    return fallback;
  }

  static std::string StripChars(const std::string& s, const Json& chars, bool left, bool right) {
    const std::string set = chars.is_string() ? chars.get<std::string>() : std::string(" \t\n\r\f\v");
    size_t begin = 0, end = s.size();
    if (left) begin = std::min(s.find_first_not_of(set), s.size());
    if (right) {
      const size_t last = s.find_last_not_of(set);
      end = last == std::string::npos ? begin : last + 1;
    }
    return begin >= end ? std::string() : s.substr(begin, end - begin);
  }

  // A macro's output for the call `e`: its parameters bound from the positional arguments, then the keyword ones,
  // then the defaults (evaluated at the call, as Jinja does); it sees the template's top-level names, not the
  // caller's locals, and may call itself (nesting bounded as blocks are).
  Json CallMacro(const Node& macro, const Expr& e) {
    const std::string& name = macro.targets[0];
    const size_t params = macro.targets.size() - 1;
    if (e.args.size() - 1 > params)
      Error(fmt::format("macro '{}' takes {} arguments, {} given", name, params, e.args.size() - 1));
    std::map<std::string, Json> bound;
    for (size_t i = 1; i < e.args.size(); ++i) bound[macro.targets[i]] = Eval(*e.args[i]);
    for (const auto& [key, value] : e.kwargs) {
      if (std::find(macro.targets.begin() + 1, macro.targets.end(), key) == macro.targets.end())
        Error(fmt::format("macro '{}' has no parameter '{}'", name, key));
      bound[key] = Eval(*value);
    }
    const size_t caller_frame = frame_;
    scopes_.emplace_back();
    frame_ = scopes_.size() - 1;
    for (size_t i = 0; i < params; ++i) {
      const std::string& param = macro.targets[i + 1];
      if (const auto it = bound.find(param); it != bound.end()) scopes_.back()[param] = it->second;
      else scopes_.back()[param] = macro.defaults[i] ? Eval(*macro.defaults[i]) : Undefined();
    }
    std::string out;
    const Flow flow = Exec(macro.body, out);
    scopes_.pop_back();
    frame_ = caller_frame;
    if (flow != Flow::kNormal) Error("'break' or 'continue' outside a loop");
    return out;
  }

  Json Call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::kName) {
      if (const auto it = macros_.find(callee.name); it != macros_.end()) return CallMacro(*it->second, e);
      if (callee.name == "strftime_now") {  // transformers' global: the local time now, formatted
        const std::vector<Json> a = Args(e, 1);
        if (a.size() != 1 || !a[0].is_string()) Error("strftime_now() takes one format string");
        const std::time_t now = std::time(nullptr);
        std::tm local{};
        localtime_r(&now, &local);
        char text[256];
        const size_t n = std::strftime(text, sizeof(text), a[0].get_ref<const std::string&>().c_str(), &local);
        return std::string(text, n);
      }
      if (callee.name == "namespace") {
        Json ns = Json::object();
        ns[kNamespaceKey] = true;
        for (const auto& [key, value] : e.kwargs) ns[key] = Eval(*value);
        return ns;
      }
      if (callee.name == "raise_exception") {
        const std::vector<Json> args = Args(e, 1);
        Error(fmt::format("the template raised: {}", args.empty() ? "" : ToText(args[0])));
      }
      if (callee.name == "range") {
        const std::vector<Json> a = Args(e, 1);
        if (a.empty() || a.size() > 3) Error("range() takes 1 to 3 arguments");
        int64_t start = 0, stop = 0, step = 1;
        if (a.size() == 1) {
          stop = Int(a[0], "range()'s stop");
        } else {
          start = Int(a[0], "range()'s start");
          stop = Int(a[1], "range()'s stop");
        }
        if (a.size() == 3) step = Int(a[2], "range()'s step");
        if (step == 0) Error("range() step cannot be zero");
        Json out = Json::array();
        for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
          out.push_back(i);
          if (__builtin_add_overflow(i, step, &i)) break;
          if (out.size() > kMaxLoopIterations) Error(fmt::format("range() longer than {} items", kMaxLoopIterations));
        }
        return out;
      }
      Error(fmt::format("unknown function '{}'", callee.name));
    }
    if (callee.kind != Expr::kAttr) Error("only functions and methods can be called");
    const Json obj = Eval(*callee.args[0]);
    const std::string& method = callee.name;
    const std::vector<Json> a = Args(e, 1);
    const auto arg = [&](size_t i) { return i < a.size() ? a[i] : Json(nullptr); };
    if (obj.is_string()) {
      const std::string& s = obj.get_ref<const std::string&>();
      if (method == "startswith" || method == "endswith") {
        const std::string x = ToText(arg(0));
        return method == "startswith" ? s.starts_with(x) : s.ends_with(x);
      }
      if (method == "strip") return StripChars(s, arg(0), true, true);
      if (method == "lstrip") return StripChars(s, arg(0), true, false);
      if (method == "rstrip") return StripChars(s, arg(0), false, true);
      if (method == "upper" || method == "lower") {
        std::string out = s;
        for (char& c : out) c = static_cast<char>(method == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                                                    : std::tolower(static_cast<unsigned char>(c)));
        return out;
      }
      if (method == "replace") {
        const std::string from = ToText(arg(0)), to = ToText(arg(1));
        if (from.empty()) return s;
        std::string out;
        size_t pos = 0;
        for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, pos)) {
          out.append(s, pos, at - pos).append(to);
          pos = at + from.size();
        }
        return out + s.substr(pos);
      }
      if (method == "split") {
        Json out = Json::array();
        if (arg(0).is_null()) {  // on runs of white space
          size_t pos = 0;
          while ((pos = s.find_first_not_of(" \t\n\r\f\v", pos)) != std::string::npos) {
            const size_t end = std::min(s.find_first_of(" \t\n\r\f\v", pos), s.size());
            out.push_back(s.substr(pos, end - pos));
            pos = end;
          }
          return out;
        }
        const std::string sep = ToText(arg(0));
        if (sep.empty()) Error("split() with an empty separator");
        size_t pos = 0;
        for (size_t at = s.find(sep); at != std::string::npos; at = s.find(sep, pos)) {
          out.push_back(s.substr(pos, at - pos));
          pos = at + sep.size();
        }
        out.push_back(s.substr(pos));
        return out;
      }
      if (method == "format") Error("str.format() is not supported");
    }
    if (obj.is_object()) {
      if (method == "get") {
        const auto it = obj.find(ToText(arg(0)));
        return it != obj.end() ? *it : arg(1);
      }
      if (method == "items" || method == "keys" || method == "values") {
        Json out = Json::array();
        for (const auto& [key, value] : obj.items()) {
          if (key == kNamespaceKey) continue;
          out.push_back(method == "items" ? Json::array({key, value}) : method == "keys" ? Json(key) : value);
        }
        return out;
      }
    }
    Error(fmt::format("unknown method '{}' on {}", method, obj.is_string() ? "a string" : obj.is_object() ? "a dict"
                                                                                     : obj.is_array() ? "a list" : "this value"));
  }

  Json Filter(const Expr& e) {
    const Json v = Eval(*e.args[0]);
    const std::vector<Json> a = Args(e, 1);
    const std::string& f = e.name;
    const auto size = [&]() -> int64_t {
      if (v.is_string()) return static_cast<int64_t>(v.get_ref<const std::string&>().size());
      if (v.is_array() || v.is_object()) return static_cast<int64_t>(v.size() - (v.is_object() && v.contains(kNamespaceKey)));
      if (IsUndefined(v)) return 0;
      Error(fmt::format("'{}' has no length", ToText(v)));
    };
    if (f == "length" || f == "count") return size();
    if (f == "tojson") {
      const Json indent = Kwarg(e, "indent", a.empty() ? Json(nullptr) : a[0]);
      if (indent.is_number_integer() && (indent.get<int64_t>() < 0 || indent.get<int64_t>() > 64))
        Error("tojson's indent must be from 0 to 64");
      std::string out;
      DumpPython(v, indent.is_number_integer() ? static_cast<int>(indent.get<int64_t>()) : -1, 0, out);
      CheckSize(out);
      return out;
    }
    if (f == "trim") return StripChars(ToText(v), Json(nullptr), true, true);
    if (f == "string") return ToText(v);
    if (f == "safe") return v;
    if (f == "upper" || f == "lower" || f == "capitalize" || f == "title") {
      std::string s = ToText(v);
      bool word_start = true;
      for (size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        const bool up = f == "upper" || (f == "capitalize" && i == 0) || (f == "title" && word_start);
        s[i] = static_cast<char>(up ? std::toupper(c) : std::tolower(c));
        word_start = !std::isalnum(c);
      }
      return s;
    }
    if (f == "int") {
      if (v.is_number_integer()) return v;
      if (v.is_number()) {
        const double d = v.get<double>();
        if (!(std::abs(d) < 9.2e18)) Error(fmt::format("int() of {} is out of range", PythonFloat(d)));
        return static_cast<int64_t>(d);
      }
      try {
        return std::stoll(ToText(v));
      } catch (const std::exception&) {
        return a.empty() ? Json(0) : a[0];
      }
    }
    if (f == "float") {
      if (v.is_number()) return v.get<double>();
      try {
        return std::stod(ToText(v));
      } catch (const std::exception&) {
        return a.empty() ? Json(0.0) : a[0];
      }
    }
    if (f == "first" || f == "last") {
      if (v.is_array()) return v.empty() ? Undefined() : (f == "first" ? v.front() : v.back());
      if (v.is_string()) {
        const std::string& s = v.get_ref<const std::string&>();
        return s.empty() ? Undefined() : Json(std::string(1, f == "first" ? s.front() : s.back()));
      }
      return Undefined();
    }
    if (f == "join") {
      const std::string sep = a.empty() ? "" : ToText(a[0]);
      std::string out;
      if (v.is_array())
        for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + ToText(v[i]);
      return out;
    }
    if (f == "default" || f == "d") {
      const bool boolean = a.size() > 1 && Truthy(a[1]);
      if (IsUndefined(v) || (boolean && !Truthy(v))) return a.empty() ? Json("") : a[0];
      return v;
    }
    if (f == "list") {
      if (v.is_array()) return v;
      Json out = Json::array();
      if (v.is_string())
        for (const char c : v.get<std::string>()) out.push_back(std::string(1, c));
      if (v.is_object())
        for (const auto& [key, value] : v.items()) out.push_back(key);
      return out;
    }
    if (f == "items") {
      Json out = Json::array();
      if (v.is_object())
        for (const auto& [key, value] : v.items())
          if (key != kNamespaceKey) out.push_back(Json::array({key, value}));
      return out;
    }
    if (f == "reverse") {
      if (v.is_string()) return std::string(v.get<std::string>().rbegin(), v.get<std::string>().rend());
      Json out = v.is_array() ? v : Json::array();
      std::reverse(out.begin(), out.end());
      return out;
    }
    if (f == "unique") {
      Json out = Json::array();
      if (v.is_array())
        for (const Json& x : v)
          if (std::none_of(out.begin(), out.end(), [&](const Json& y) { return Equal(x, y); })) out.push_back(x);
      return out;
    }
    Error(fmt::format("unknown filter '{}'", f));
  }

  bool Test(const Expr& e) {
    const Json v = Eval(*e.args[0]);
    const std::string& t = e.name;
    if (t == "defined") return !IsUndefined(v);
    if (t == "undefined") return IsUndefined(v);
    if (t == "none") return v.is_null();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.is_number_integer();
    if (t == "float") return v.is_number_float();
    if (t == "mapping") return v.is_object();
    if (t == "sequence" || t == "iterable") return v.is_array() || v.is_string() || v.is_object();
    if (t == "boolean") return v.is_boolean();
    if (t == "true") return v.is_boolean() && v.get<bool>();
    if (t == "false") return v.is_boolean() && !v.get<bool>();
    if (t == "even" || t == "odd") {
      if (!v.is_number_integer()) Error(fmt::format("'{}' test needs an integer", t));
      return (v.get<int64_t>() % 2 == 0) == (t == "even");
    }
    if (t == "equalto" || t == "eq" || t == "sameas") return e.args.size() > 1 && Equal(v, Eval(*e.args[1]));
    Error(fmt::format("unknown test '{}'", t));
  }

  void CheckSize(const std::string& out) const {
    if (out.size() > kMaxOutputBytes) Error(fmt::format("the rendered text passed {} MiB", kMaxOutputBytes >> 20));
  }

  std::string where_;
  std::vector<std::map<std::string, Json>> scopes_;
  std::map<std::string, const Node*> macros_;
  size_t frame_ = 0;  // the first scope of the macro being run (0: none)
  int render_depth_ = 0;
  uint64_t iterations_ = 0;
};

// A special-token entry of tokenizer_config.json: a string or an AddedToken object.
std::optional<std::string> TokenText(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

ChatTemplate FromTokenizerConfig(const std::filesystem::path& config_path, const std::filesystem::path& jinja) {
  ChatTemplate t;
  t.special_tokens = Json::object();
  nlohmann::json config = nlohmann::json::object();
  if (std::filesystem::exists(config_path)) {
    config = ReadJsonFile(config_path);
    if (!config.is_object()) Fail("{}: expected a JSON object", config_path.string());
    for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"})
      if (config.contains(key))
        if (const auto text = TokenText(config[key])) t.special_tokens[key] = *text;
  }
  if (!jinja.empty() && std::filesystem::exists(jinja)) {
    t.source = ReadTextFile(jinja);
    t.where = jinja.string();
    return t;
  }
  t.where = config_path.string() + ": chat_template";
  if (!config.contains("chat_template"))
    Fail("{}: no chat template (no chat_template key{})", config_path.string(),
         jinja.empty() ? "" : ", no " + jinja.filename().string() + " beside it");
  const nlohmann::json& value = config["chat_template"];
  if (value.is_string()) {
    t.source = value.get<std::string>();
    return t;
  }
  if (value.is_array()) {
    for (const nlohmann::json& entry : value)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        t.source = entry["template"].get<std::string>();
        return t;
      }
    Fail("{}: a list of templates without a \"default\" one", t.where);
  }
  Fail("{}: expected a string or a list of {{name, template}}", t.where);
}

}  // namespace

ChatTemplate LoadChatTemplate(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) return FromTokenizerConfig(path / "tokenizer_config.json", path / "chat_template.jinja");
  if (!fs::exists(path)) Fail("{}: no such file or folder", path.string());
  if (path.extension() == ".gguf") {
    const GgufFile f = GgufFile::Open(path);
    ChatTemplate t;
    t.where = path.string() + ": tokenizer.chat_template";
    if (f.Find("tokenizer.chat_template") == nullptr) Fail("{}: no tokenizer.chat_template key", path.string());
    t.source = f.GetString("tokenizer.chat_template");
    t.special_tokens = Json::object();
    if (f.Find("tokenizer.ggml.tokens") != nullptr) {
      const std::vector<std::string> tokens = f.GetArrayOf<std::string>("tokenizer.ggml.tokens");
      for (const auto& [key, name] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token"},
                                      std::pair{"tokenizer.ggml.eos_token_id", "eos_token"}})
        if (f.Find(key) != nullptr && f.GetU32(key) < tokens.size()) t.special_tokens[name] = tokens[f.GetU32(key)];
    }
    return t;
  }
  return FromTokenizerConfig(path, {});
}

std::string ApplyChatTemplate(const ChatTemplate& chat_template, const nlohmann::ordered_json& messages,
                              bool add_generation_prompt, const nlohmann::ordered_json& variables) {
  // What transformers passes: messages, tools and documents (None unless given), the special
  // tokens, add_generation_prompt, then the caller's variables.
  Json context = {{"messages", messages}, {"tools", nullptr}, {"documents", nullptr}};
  for (const auto& [key, value] : chat_template.special_tokens.items()) context[key] = value;
  context["add_generation_prompt"] = add_generation_prompt;
  for (const auto& [key, value] : variables.items()) context[key] = value;
  return RenderChatTemplate(chat_template.source, context, chat_template.where);
}

std::string RenderChatTemplate(std::string_view source, const nlohmann::ordered_json& context, const std::string& where) {
  // Jinja drops one newline at the very end of a template (keep_trailing_newline is off).
  if (source.ends_with("\r\n")) {
    source.remove_suffix(2);
  } else if (source.ends_with('\n')) {
    source.remove_suffix(1);
  }
  const Body body = TemplateParser(source, where).Parse();
  std::string out;
  Renderer(context, where).Run(body, out);
  return out;
}

}  // namespace lowbit
