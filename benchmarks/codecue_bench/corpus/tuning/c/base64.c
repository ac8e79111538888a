/*
 * base64.c - RFC 4648 base64 encoding and decoding with explicit error reporting,
 * plus a tiny command-line front end: `base64 -d < in > out` or `base64 < in > out`.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char ALPHABET[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

typedef enum {
    B64_OK = 0,
    B64_BAD_CHAR,
    B64_BAD_LENGTH,
    B64_BAD_PADDING,
} b64_result;

size_t base64_encoded_size(size_t n) {
    return 4 * ((n + 2) / 3);
}

/* Writes base64_encoded_size(n) characters plus a terminating NUL to out. */
void base64_encode(const uint8_t *in, size_t n, char *out) {
    size_t i = 0;
    char *o = out;
    for (; i + 2 < n; i += 3) {
        uint32_t triple = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        *o++ = ALPHABET[(triple >> 18) & 0x3F];
        *o++ = ALPHABET[(triple >> 12) & 0x3F];
        *o++ = ALPHABET[(triple >> 6) & 0x3F];
        *o++ = ALPHABET[triple & 0x3F];
    }
    if (i < n) {
        uint32_t triple = (uint32_t)in[i] << 16;
        if (i + 1 < n) {
            triple |= (uint32_t)in[i + 1] << 8;
        }
        *o++ = ALPHABET[(triple >> 18) & 0x3F];
        *o++ = ALPHABET[(triple >> 12) & 0x3F];
        *o++ = i + 1 < n ? ALPHABET[(triple >> 6) & 0x3F] : '=';
        *o++ = '=';
    }
    *o = '\0';
}

static int decode_char(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes n characters (whitespace ignored) into out, which needs 3 * n / 4 bytes. */
b64_result base64_decode(const char *in, size_t n, uint8_t *out, size_t *out_len, size_t *error_at) {
    uint32_t buffer = 0;
    int bits = 0;
    size_t padding = 0, symbols = 0, written = 0;
    for (size_t i = 0; i < n; i++) {
        char c = in[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
            continue;
        }
        *error_at = i;
        if (c == '=') {
            padding++;
            symbols++;
            continue;
        }
        if (padding > 0) {
            return B64_BAD_PADDING; /* data after '=' */
        }
        int value = decode_char(c);
        if (value < 0) {
            return B64_BAD_CHAR;
        }
        symbols++;
        buffer = buffer << 6 | (uint32_t)value;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[written++] = (uint8_t)(buffer >> bits);
        }
    }
    *error_at = n;
    if (symbols % 4 != 0) {
        return B64_BAD_LENGTH;
    }
    if (padding > 2) {
        return B64_BAD_PADDING;
    }
    *out_len = written;
    return B64_OK;
}

static char *read_all(FILE *f, size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf != NULL && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *bigger = realloc(buf, cap *= 2);
            if (bigger == NULL) {
                free(buf);
                return NULL;
            }
            buf = bigger;
        }
    }
    *len = n;
    return buf;
}

int main(int argc, char **argv) {
    bool decode = argc > 1 && strcmp(argv[1], "-d") == 0;
    size_t len = 0;
    char *input = read_all(stdin, &len);
    if (input == NULL) {
        perror("base64: read");
        return 1;
    }
    if (decode) {
        uint8_t *out = malloc(len / 4 * 3 + 3);
        size_t out_len = 0, error_at = 0;
        b64_result r = out ? base64_decode(input, len, out, &out_len, &error_at) : B64_BAD_LENGTH;
        if (r != B64_OK) {
            static const char *messages[] = {"ok", "invalid character", "truncated input", "misplaced padding"};
            fprintf(stderr, "base64: %s at byte %zu\n", messages[r], error_at);
            free(out);
            free(input);
            return 1;
        }
        fwrite(out, 1, out_len, stdout);
        free(out);
    } else {
        char *out = malloc(base64_encoded_size(len) + 1);
        if (out == NULL) {
            free(input);
            return 1;
        }
        base64_encode((const uint8_t *)input, len, out);
        puts(out);
        free(out);
    }
    free(input);
    return 0;
}
