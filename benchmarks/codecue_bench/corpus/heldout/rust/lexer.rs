//! A lexer for a small query language: `status = "open" and priority >= 2 or archived`.
//! `priority >= 2` → [Ident("priority"), Op(">="), Int(2)]

use std::{fmt, iter::Peekable, str::CharIndices};

#[derive(Debug, Clone, PartialEq)]
pub enum TokenKind {
    Ident(String),
    Str(String),
    Int(i64),
    Float(f64),
    Op(&'static str),
    LParen,
    RParen,
    And,
    Or,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub kind: TokenKind,
    pub start: usize,
    pub end: usize,
}

#[derive(Debug, PartialEq)]
pub enum LexError {
    UnexpectedChar { ch: char, at: usize },
    UnterminatedString { start: usize },
    BadNumber { text: String, at: usize },
}

impl fmt::Display for LexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LexError::UnexpectedChar { ch, at } => write!(f, "unexpected {:?} at byte {}", ch, at),
            LexError::UnterminatedString { start } => write!(f, "string starting at byte {} never ends", start),
            LexError::BadNumber { text, at } => write!(f, "bad number {:?} at byte {}", text, at),
        }
    }
}

impl std::error::Error for LexError {}
pub struct Lexer<'a> {
    src: &'a str,
    chars: Peekable<CharIndices<'a>>,
}

impl<'a> Lexer<'a> {
    pub fn new(src: &'a str) -> Self {
        Lexer { src, chars: src.char_indices().peekable() }
    }

    fn take_while<F: Fn(char) -> bool>(&mut self, start: usize, pred: F) -> &'a str {
        let mut end = start + self.src[start..].chars().next().map_or(0, char::len_utf8);
        while let Some(&(i, c)) = self.chars.peek() {
            if !pred(c) {
                break;
            }
            end = i + c.len_utf8();
            self.chars.next();
        }
        &self.src[start..end]
    }

    fn string(&mut self, start: usize, quote: char) -> Result<TokenKind, LexError> {
        let mut value = String::new();
        while let Some((_, c)) = self.chars.next() {
            match c {
                '\\' => match self.chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => break,
                },
                c if c == quote => return Ok(TokenKind::Str(value)),
                c => value.push(c),
            }
        }
        Err(LexError::UnterminatedString { start })
    }

    fn number(&mut self, start: usize) -> Result<TokenKind, LexError> {
        let text = self.take_while(start, |c| c.is_ascii_digit() || c == '.' || c == '_');
        let cleaned: String = text.chars().filter(|&c| c != '_').collect();
        let bad = || LexError::BadNumber { text: text.to_string(), at: start };
        if cleaned.contains('.') {
            cleaned.parse::<f64>().map(TokenKind::Float).map_err(|_| bad())
        } else {
            cleaned.parse::<i64>().map(TokenKind::Int).map_err(|_| bad())
        }
    }

    fn operator(&mut self, first: char, at: usize) -> Result<TokenKind, LexError> {
        let next = self.chars.peek().map(|&(_, c)| c);
        let (op, two) = match (first, next) {
            ('>', Some('=')) => (">=", true),
            ('<', Some('=')) => ("<=", true),
            ('=', _) => ("=", false),
            ('>', _) => (">", false),
            ('<', _) => ("<", false),
            (ch, _) => return Err(LexError::UnexpectedChar { ch, at }),
        };
        if two {
            self.chars.next();
        }
        Ok(TokenKind::Op(op))
    }
}

impl<'a> Iterator for Lexer<'a> {
    type Item = Result<Token, LexError>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.chars.next_if(|&(_, c)| c.is_whitespace()).is_some() {}
        let (start, c) = self.chars.next()?;
        let kind = match c {
            '(' => Ok(TokenKind::LParen),
            ')' => Ok(TokenKind::RParen),
            '"' | '\'' => self.string(start, c),
            c if c.is_ascii_digit() => self.number(start),
            c if c.is_alphabetic() || c == '_' => {
                let word = self.take_while(start, |c| c.is_alphanumeric() || c == '_' || c == '.');
                Ok(match word.to_ascii_lowercase().as_str() {
                    "and" => TokenKind::And,
                    "or" => TokenKind::Or,
                    _ => TokenKind::Ident(word.to_string()),
                })
            }
            c => self.operator(c, start),
        };
        let end = self.chars.peek().map_or(self.src.len(), |&(i, _)| i);
        Some(kind.map(|kind| Token { kind, start, end }))
    }
}

pub fn tokenize(src: &str) -> Result<Vec<Token>, LexError> {
    Lexer::new(src).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexes_a_query() {
        let tokens = tokenize("status = \"open\" and priority >= 2").unwrap();
        let kinds: Vec<TokenKind> = tokens.into_iter().map(|t| t.kind).collect();
        assert_eq!(kinds[0], TokenKind::Ident("status".into()));
        assert_eq!(kinds[2], TokenKind::Str("open".into()));
        assert_eq!(kinds[5], TokenKind::Op(">="));
        assert_eq!(kinds[6], TokenKind::Int(2));
    }

    #[test]
    fn reports_errors_with_offsets() {
        assert_eq!(tokenize("name = 'abc"), Err(LexError::UnterminatedString { start: 7 }));
        assert_eq!(tokenize("a # b"), Err(LexError::UnexpectedChar { ch: '#', at: 2 }));
        assert_eq!(tokenize("x > 1.2.3").unwrap_err(), LexError::BadNumber { text: "1.2.3".into(), at: 4 });
    }
}
