package io.racaffinity.jdbc;

import java.util.LinkedHashMap;
import java.util.Map;

/** Parses {@code NAME=value} list properties ({@code RAC1=jdbc:... | RAC2=jdbc:...}, or one per line). */
final class ListProperty {
    private ListProperty() {}

    static Map<String, String> parse(String list, String property) {
        if (list == null) {
            return null;
        }
        Map<String, String> m = new LinkedHashMap<>();
        for (String raw : list.split("[\\n|]")) {
            String e = raw.trim();
            if (e.isEmpty() || e.startsWith("#")) {
                continue;
            }
            int eq = e.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException(property + ": expected NAME=value entries separated by newlines"
                        + " or |, got an entry without `=`");
            }
            String name = e.substring(0, eq).trim();
            // Node names match case-insensitively, and a property's setter takes either case of its first letter:
            // a second entry is a mistake (the core refuses a key given twice), not a silent override.
            for (String k : m.keySet()) {
                if (k.equalsIgnoreCase(name)) {
                    throw new IllegalArgumentException(property + ": `" + name + "` is given more than once"
                            + (k.equals(name) ? "" : " (as `" + k + "`)"));
                }
            }
            m.put(name, e.substring(eq + 1).trim());
        }
        return m;
    }
}
