package io.racaffinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * The library's packages depend on each other in one direction only: the core ({@code
 * io.racaffinity}) on none of its sub-packages, and no two sub-packages on each other both ways,
 * (nor in a longer cycle), so that each can be read, and one day split off, on its own. Read from the sources: an import
 * or a qualified name in code (comments left out) is a dependency.
 */
class PackageCyclesTest {
    private static final Path MAIN = Path.of(System.getProperty("racaffinity.repo", ".."), "java", "src", "main", "java",
            "io", "racaffinity");
    private static final Pattern USE = Pattern.compile("\\bio\\.racaffinity\\.([a-z][a-z0-9]*)\\.[A-Za-z]");
    private static final Pattern COMMENTS = Pattern.compile("(?s)/\\*.*?\\*/|//[^\\n]*");

    /** package ("" for the core) → the library's packages it uses. */
    static Map<String, Set<String>> graph() throws IOException {
        Map<String, Set<String>> g = new TreeMap<>();
        List<Path> sources;
        try (Stream<Path> s = Files.walk(MAIN)) {
            sources = s.filter(p -> p.toString().endsWith(".java")).toList();
        }
        for (Path f : sources) {
            Path dir = MAIN.relativize(f.getParent());
            String pkg = dir.toString().replace('/', '.');
            String code = COMMENTS.matcher(Files.readString(f)).replaceAll(" ");
            Set<String> uses = g.computeIfAbsent(pkg, k -> new TreeSet<>());
            Matcher m = USE.matcher(code);
            while (m.find()) {
                if (!m.group(1).equals(pkg)) {
                    uses.add(m.group(1));
                }
            }
        }
        return g;
    }

    /** The packages {@code from} uses, directly or through others. */
    private static Set<String> reachable(Map<String, Set<String>> g, String from) {
        Set<String> seen = new TreeSet<>();
        List<String> todo = new ArrayList<>(g.getOrDefault(from, Set.of()));
        while (!todo.isEmpty()) {
            String p = todo.remove(todo.size() - 1);
            if (seen.add(p)) {
                todo.addAll(g.getOrDefault(p, Set.of()));
            }
        }
        return seen;
    }

    @Test
    void noPackageUsesItselfThroughOthers() throws IOException {
        Map<String, Set<String>> g = graph();
        assertTrue(g.keySet().containsAll(List.of("", "jdbc", "jmx", "xa")), "read the sources: " + g.keySet());
        assertTrue(g.get("jdbc").contains("jmx"), "the data source registers the cluster's MXBean: " + g);
        List<String> cycles = new ArrayList<>();
        for (String a : g.keySet()) {
            if (reachable(g, a).contains(a)) {
                cycles.add(a.isEmpty() ? "(core)" : a);
            }
        }
        assertEquals(List.of(), cycles, "packages in a cycle; package graph " + g);
        assertEquals(Set.of(), g.get(""), "the core package uses none of its sub-packages");
    }
}
