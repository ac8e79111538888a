package org.codecue.examples;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/** Counts words in text files and reports the most frequent ones. */
public class WordCount {
    private final Map<String, Integer> counts = new HashMap<>();
    private int totalWords = 0;

    /** Adds every word of {@code line} to the counts. */
    public void addLine(String line) {
        for (String token : line.toLowerCase().split("[^a-z0-9']+")) {
            if (token.isEmpty()) {
                continue;
            }
            // merge() inserts 1 for a new word and adds 1 otherwise.
            counts.merge(token, 1, Integer::sum);
            totalWords++;
        }
    }

    public void addFile(Path path) throws IOException {
        for (String line : Files.readAllLines(path)) {
            addLine(line);
        }
    }

    public int count(String word) {
        return counts.getOrDefault(word.toLowerCase(), 0);
    }

    public int getTotalWords() {
        return totalWords;
    }

    /** The {@code n} most frequent words, most frequent first; ties in alphabetical order. */
    public List<Map.Entry<String, Integer>> top(int n) {
        List<Map.Entry<String, Integer>> entries = new ArrayList<>(counts.entrySet());
        entries.sort((a, b) -> {
            int byCount = Integer.compare(b.getValue(), a.getValue());
            return byCount != 0 ? byCount : a.getKey().compareTo(b.getKey());
        });
        return entries.subList(0, Math.min(n, entries.size()));
    }

    public static void main(String[] args) throws IOException {
        if (args.length == 0) {
            System.err.println("usage: WordCount FILE...");
            System.exit(2);
        }
        // Read every file named on the command line before reporting.
        WordCount wc = new WordCount();
        for (String arg : args) {
            wc.addFile(Path.of(arg));
        }
        System.out.printf("%d words%n", wc.getTotalWords());
        for (Map.Entry<String, Integer> entry : wc.top(10)) {
            System.out.printf("%-20s %6d%n", entry.getKey(), entry.getValue());
        }
    }
}
