// A JSON tokenizer that reports line and column for every token and error.

#include <cctype>
#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace json {

enum class TokenType { LBrace, RBrace, LBracket, RBracket, Colon, Comma, String, Number, True, False, Null, End };

struct Position {
    int line = 1;
    int column = 1;
};

struct Token {
    TokenType type;
    std::variant<std::monostate, std::string, double> value;
    Position at;
};

class SyntaxError : public std::runtime_error {
public:
    SyntaxError(const std::string& what, Position at)
        : std::runtime_error(std::to_string(at.line) + ":" + std::to_string(at.column) + ": " + what) {}
};

class Lexer {
public:
    explicit Lexer(std::string_view text) : text_(text) {}

    std::vector<Token> tokenize() {
        std::vector<Token> tokens;
        do {
            tokens.push_back(next());
        } while (tokens.back().type != TokenType::End);
        return tokens;
    }

private:
    char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

    char advance() {
        char c = text_[pos_++];
        if (c == '\n') {
            ++where_.line;
            where_.column = 1;
        } else {
            ++where_.column;
        }
        return c;
    }

    void skip_whitespace() {
        while (pos_ < text_.size() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) {
            advance();
        }
    }

    Token next() {
        skip_whitespace();
        const Position start = where_;
        if (pos_ >= text_.size()) {
            return {TokenType::End, {}, start};
        }
        const char c = peek();
        switch (c) {
            case '{': advance(); return {TokenType::LBrace, {}, start};
            case '}': advance(); return {TokenType::RBrace, {}, start};
            case '[': advance(); return {TokenType::LBracket, {}, start};
            case ']': advance(); return {TokenType::RBracket, {}, start};
            case ':': advance(); return {TokenType::Colon, {}, start};
            case ',': advance(); return {TokenType::Comma, {}, start};
            case '"': return {TokenType::String, string_literal(), start};
            default: break;
        }
        if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
            return {TokenType::Number, number(), start};
        }
        for (auto [word, type] : {std::pair{"true", TokenType::True}, std::pair{"false", TokenType::False},
                                  std::pair{"null", TokenType::Null}}) {
            if (text_.substr(pos_, std::string_view(word).size()) == word) {
                for (std::size_t i = 0; i < std::string_view(word).size(); ++i) advance();
                return {type, {}, start};
            }
        }
        throw SyntaxError(std::string("unexpected character '") + c + "'", start);
    }

    std::string string_literal() {
        const Position start = where_;
        advance();  // opening quote
        std::string out;
        while (pos_ < text_.size()) {
            char c = advance();
            if (c == '"') {
                return out;
            }
            if (c != '\\') {
                out += c;
                continue;
            }
            if (pos_ >= text_.size()) break;
            switch (char e = advance()) {
                case 'n': out += '\n'; break;
                case 't': out += '\t'; break;
                case 'r': out += '\r'; break;
                case '"': case '\\': case '/': out += e; break;
                case 'u': {
                    if (pos_ + 4 > text_.size()) throw SyntaxError("short \\u escape", where_);
                    const auto code = static_cast<std::uint32_t>(std::stoul(std::string(text_.substr(pos_, 4)), nullptr, 16));
                    for (int i = 0; i < 4; ++i) advance();
                    // Two-byte UTF-8 covers Latin-1 and friends; wider code points are replaced.
                    if (code < 0x80) {
                        out += static_cast<char>(code);
                    } else if (code < 0x800) {
                        out += static_cast<char>(0xC0 | (code >> 6));
                        out += static_cast<char>(0x80 | (code & 0x3F));
                    } else {
                        out += '?';
                    }
                    break;
                }
                default: throw SyntaxError(std::string("bad escape \\") + e, where_);
            }
        }
        throw SyntaxError("unterminated string", start);
    }

    double number() {
        const std::size_t begin = pos_;
        while (pos_ < text_.size() && std::string_view("+-.eE0123456789").find(peek()) != std::string_view::npos) {
            advance();
        }
        return std::stod(std::string(text_.substr(begin, pos_ - begin)));
    }

    std::string_view text_;
    std::size_t pos_ = 0;
    Position where_;
};

}  // namespace json

int main() {
    try {
        auto tokens = json::Lexer(R"({"name": "caf\u00e9", "tags": ["a", "b"], "price": -3.5e1, "ok": true})").tokenize();
        std::cout << tokens.size() << " tokens, last at column " << tokens.back().at.column << '\n';
        json::Lexer(R"({"broken": tru})").tokenize();
    } catch (const json::SyntaxError& e) {
        std::cerr << "syntax error: " << e.what() << '\n';
        return 1;
    }
    return 0;
}
