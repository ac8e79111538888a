import java.io.IOException;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.util.ArrayDeque;
import java.util.Collection;
import java.util.Deque;
import java.util.Map;

/**
 * A streaming JSON writer with optional pretty printing. Callers open objects and arrays,
 * write names and values, and the writer checks that the nesting is well formed.
 */
public class JsonWriter implements AutoCloseable {
    private enum Scope { EMPTY_OBJECT, OBJECT, EMPTY_ARRAY, ARRAY, TOP }

    private final Writer out;
    private final String indent;
    private final Deque<Scope> stack = new ArrayDeque<>();
    private boolean expectingValueAfterName = false;

    public JsonWriter(Writer out, int indentSpaces) {
        this.out = out;
        this.indent = " ".repeat(Math.max(0, indentSpaces));
        stack.push(Scope.TOP);
    }

    public JsonWriter beginObject() { return open(Scope.EMPTY_OBJECT, '{'); }
    public JsonWriter endObject() { return close(Scope.EMPTY_OBJECT, Scope.OBJECT, '}'); }
    public JsonWriter beginArray() { return open(Scope.EMPTY_ARRAY, '['); }
    public JsonWriter endArray() { return close(Scope.EMPTY_ARRAY, Scope.ARRAY, ']'); }

    public JsonWriter name(String name) {
        Scope scope = stack.peek();
        if ((scope != Scope.OBJECT && scope != Scope.EMPTY_OBJECT) || expectingValueAfterName) {
            throw new IllegalStateException("name() outside an object or twice in a row: " + name);
        }
        separate();
        string(name);
        raw(indent.isEmpty() ? ":" : ": ");
        expectingValueAfterName = true;
        return this;
    }

    public JsonWriter value(Object value) {
        if (value == null) {
            return literal("null");
        } else if (value instanceof String s) {
            beforeValue();
            string(s);
            return this;
        } else if (value instanceof Number || value instanceof Boolean) {
            if (value instanceof Double d && (d.isNaN() || d.isInfinite())) {
                throw new IllegalArgumentException("JSON cannot represent " + d);
            }
            return literal(value.toString());
        } else if (value instanceof Map<?, ?> map) {
            beginObject();
            for (Map.Entry<?, ?> entry : map.entrySet()) {
                name(String.valueOf(entry.getKey())).value(entry.getValue());
            }
            return endObject();
        } else if (value instanceof Collection<?> items) {
            beginArray();
            for (Object item : items) {
                value(item);
            }
            return endArray();
        }
        throw new IllegalArgumentException("unsupported type " + value.getClass().getName());
    }

    private JsonWriter literal(String text) {
        beforeValue();
        raw(text);
        return this;
    }

    private JsonWriter open(Scope empty, char bracket) {
        beforeValue();
        stack.push(empty);
        raw(String.valueOf(bracket));
        return this;
    }

    private JsonWriter close(Scope empty, Scope nonEmpty, char bracket) {
        Scope scope = stack.peek();
        if (scope != empty && scope != nonEmpty || expectingValueAfterName) {
            throw new IllegalStateException("unbalanced " + bracket);
        }
        stack.pop();
        if (scope == nonEmpty) {
            newline();
        }
        raw(String.valueOf(bracket));
        return this;
    }

    private void beforeValue() {
        if (expectingValueAfterName) {
            expectingValueAfterName = false;
            return;
        }
        Scope scope = stack.peek();
        if (scope == Scope.OBJECT || scope == Scope.EMPTY_OBJECT) {
            throw new IllegalStateException("value in an object needs a name() first");
        }
        separate();
    }

    private void separate() {
        Scope scope = stack.pop();
        switch (scope) {
            case OBJECT, ARRAY -> raw(",");
            default -> { }
        }
        stack.push(scope == Scope.EMPTY_OBJECT ? Scope.OBJECT : scope == Scope.EMPTY_ARRAY ? Scope.ARRAY : scope);
        if (scope != Scope.TOP) {
            newline();
        }
    }

    private void newline() {
        if (!indent.isEmpty()) {
            raw("\n" + indent.repeat(stack.size() - 1));
        }
    }

    private void string(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\t' -> sb.append("\\t");
                default -> sb.append(c < 0x20 ? String.format("\\u%04x", (int) c) : String.valueOf(c));
            }
        }
        raw(sb.append('"').toString());
    }

    private void raw(String text) {
        try {
            out.write(text);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public void close() throws IOException {
        if (stack.size() != 1) {
            throw new IllegalStateException("unclosed object or array");
        }
        out.flush();
    }
}
