/*
 * split_args.c - split a command line into argv the way a POSIX shell would for simple cases:
 * whitespace separates words, 'single quotes' are literal, "double quotes" allow \" and \\,
 * and a backslash outside quotes escapes the next character.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum split_status {
    SPLIT_OK = 0,
    SPLIT_UNTERMINATED_QUOTE,
    SPLIT_TRAILING_BACKSLASH,
    SPLIT_NO_MEMORY,
};

struct argv_list {
    char **items;
    size_t count;
    size_t capacity;
};

static const char *split_status_message(enum split_status status) {
    switch (status) {
    case SPLIT_OK:
        return "ok";
    case SPLIT_UNTERMINATED_QUOTE:
        return "unterminated quote";
    case SPLIT_TRAILING_BACKSLASH:
        return "backslash at end of input";
    case SPLIT_NO_MEMORY:
        return strerror(ENOMEM);
    }
    return "unknown error";
}

static int argv_push(struct argv_list *list, const char *word, size_t len) {
    /* Keep one spare slot so the array can always be NULL-terminated like a real argv. */
    if (list->count + 2 > list->capacity) {
        size_t capacity = list->capacity ? list->capacity * 2 : 8;
        char **items = realloc(list->items, capacity * sizeof(*items));
        if (items == NULL) {
            return -1;
        }
        list->items = items;
        list->capacity = capacity;
    }
    char *copy = malloc(len + 1);
    if (copy == NULL) {
        return -1;
    }
    memcpy(copy, word, len);
    copy[len] = '\0';
    list->items[list->count++] = copy;
    list->items[list->count] = NULL;
    return 0;
}

void argv_free(struct argv_list *list) {
    for (size_t i = 0; i < list->count; i++) {
        free(list->items[i]);
    }
    free(list->items);
    list->items = NULL;
    list->count = list->capacity = 0;
}

enum split_status split_args(const char *line, struct argv_list *out) {
    size_t cap = strlen(line) + 1;
    char *word = malloc(cap); /* a word is never longer than the whole line */
    if (word == NULL) {
        return SPLIT_NO_MEMORY;
    }
    enum split_status status = SPLIT_OK;
    size_t len = 0;
    int in_word = 0;
    const char *p = line;

    while (*p != '\0' && status == SPLIT_OK) {
        char c = *p++;
        if (c == ' ' || c == '\t' || c == '\n') {
            if (in_word && argv_push(out, word, len) != 0) {
                status = SPLIT_NO_MEMORY;
            }
            in_word = 0;
            len = 0;
        } else if (c == '\\') {
            if (*p == '\0') {
                status = SPLIT_TRAILING_BACKSLASH;
            } else {
                word[len++] = *p++;
                in_word = 1;
            }
        } else if (c == '\'' || c == '"') {
            in_word = 1;
            while (*p != '\0' && *p != c) {
                if (c == '"' && *p == '\\' && (p[1] == '"' || p[1] == '\\')) {
                    p++;
                }
                word[len++] = *p++;
            }
            if (*p == '\0') {
                status = SPLIT_UNTERMINATED_QUOTE;
            } else {
                p++; /* closing quote */
            }
        } else {
            word[len++] = c;
            in_word = 1;
        }
    }
    if (status == SPLIT_OK && in_word && argv_push(out, word, len) != 0) {
        status = SPLIT_NO_MEMORY;
    }
    free(word);
    if (status != SPLIT_OK) {
        argv_free(out);
    }
    return status;
}

int main(int argc, char **argv) {
    const char *samples[] = {
        "ls -la '/tmp/my dir'",
        "echo \"say \\\"hi\\\"\" plain\\ space",
        "grep 'unterminated",
        "",
    };
    size_t n = argc > 1 ? (size_t)(argc - 1) : sizeof(samples) / sizeof(samples[0]);
    for (size_t i = 0; i < n; i++) {
        const char *line = argc > 1 ? argv[i + 1] : samples[i];
        struct argv_list words = {0};
        enum split_status status = split_args(line, &words);
        printf("%-40s -> ", line);
        if (status != SPLIT_OK) {
            printf("error: %s\n", split_status_message(status));
            continue;
        }
        for (size_t w = 0; w < words.count; w++) {
            printf("[%s]%s", words.items[w], w + 1 < words.count ? " " : "");
        }
        printf(" (%zu words)\n", words.count);
        argv_free(&words);
    }
    return 0;
}
