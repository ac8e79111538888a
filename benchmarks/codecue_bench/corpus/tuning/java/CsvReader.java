import java.io.BufferedReader;
import java.io.IOException;
import java.io.Reader;
import java.io.StringReader;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.TreeMap;

/**
 * Reads RFC 4180 CSV: quoted fields may contain commas, doubled quotes and line breaks.
 * Rows are exposed as an {@link Iterable} so large files are never held in memory at once.
 */
public class CsvReader implements Iterable<List<String>>, AutoCloseable {
    private final BufferedReader in;
    private final char delimiter;
    private int lineNumber = 0;

    public static class CsvFormatException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        public CsvFormatException(int line, String message) {
            super("line " + line + ": " + message);
        }
    }

    public CsvReader(Reader reader, char delimiter) {
        this.in = reader instanceof BufferedReader b ? b : new BufferedReader(reader);
        this.delimiter = delimiter;
    }

    /** Returns the next row, or null at end of input. */
    public List<String> readRow() throws IOException {
        String line = in.readLine();
        if (line == null) {
            return null;
        }
        lineNumber++;
        int startLine = lineNumber;
        List<String> fields = new ArrayList<>();
        StringBuilder field = new StringBuilder();
        boolean quoted = false;
        int i = 0;
        while (true) {
            if (i == line.length()) {
                if (!quoted) {
                    break;
                }
                // A quoted field continues on the next physical line.
                String next = in.readLine();
                if (next == null) {
                    throw new CsvFormatException(startLine, "unterminated quoted field");
                }
                lineNumber++;
                field.append('\n');
                line = next;
                i = 0;
                continue;
            }
            char c = line.charAt(i++);
            if (quoted) {
                if (c == '"' && i < line.length() && line.charAt(i) == '"') {
                    field.append('"');
                    i++;
                } else if (c == '"') {
                    quoted = false;
                } else {
                    field.append(c);
                }
            } else if (c == '"' && field.length() == 0) {
                quoted = true;
            } else if (c == delimiter) {
                fields.add(field.toString());
                field.setLength(0);
            } else {
                field.append(c);
            }
        }
        fields.add(field.toString());
        return fields;
    }

    @Override
    public Iterator<List<String>> iterator() {
        return new Iterator<>() {
            private List<String> next = advance();

            private List<String> advance() {
                try {
                    return readRow();
                } catch (IOException e) {
                    throw new IllegalStateException("read failed at line " + lineNumber, e);
                }
            }

            @Override
            public boolean hasNext() {
                return next != null;
            }

            @Override
            public List<String> next() {
                if (next == null) {
                    throw new NoSuchElementException();
                }
                List<String> current = next;
                next = advance();
                return current;
            }
        };
    }

    @Override
    public void close() throws IOException {
        in.close();
    }

    /** Sums the numeric column {@code valueColumn} grouped by the text column {@code keyColumn}. */
    public static Map<String, Double> totalsBy(Iterable<List<String>> rows, int keyColumn, int valueColumn) {
        Map<String, Double> totals = new TreeMap<>();
        for (List<String> row : rows) {
            if (row.size() <= Math.max(keyColumn, valueColumn)) {
                continue;
            }
            try {
                totals.merge(row.get(keyColumn), Double.parseDouble(row.get(valueColumn).trim()), Double::sum);
            } catch (NumberFormatException e) {
                // header rows and blank amounts are skipped
            }
        }
        return totals;
    }

    public static void main(String[] args) throws IOException {
        String data = "region,amount,note\nnorth,12.5,\"first, with comma\"\nsouth,7,\"multi\nline\"\nnorth,3.25,\"say \"\"hi\"\"\"\n";
        try (CsvReader reader = new CsvReader(new StringReader(data), ',')) {
            System.out.println(totalsBy(reader, 0, 1));
        }
    }
}
