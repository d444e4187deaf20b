package io.racaffinity.test;

import java.util.List;
import java.util.stream.Collectors;

/**
 * The live threads the library started, found by name: the check, after a close, that none is left running (an
 * application server checks an undeployed application's threads right after its resources are closed).
 */
public final class Threads {
    private Threads() {}

    /**
     * @param prefix how their names start ({@code racaffinity-jta-sweep-mycluster})
     * @return the live threads so named
     */
    public static List<Thread> named(String prefix) {
        return Thread.getAllStackTraces().keySet().stream()
                .filter(t -> t.isAlive() && t.getName().startsWith(prefix)).collect(Collectors.toList());
    }

    /**
     * @param cluster a cluster's name
     * @return the live library threads named after it ({@code racaffinity-<part>-<cluster>...})
     */
    public static List<Thread> of(String cluster) {
        return named("racaffinity-").stream().filter(t -> t.getName().contains(cluster)).collect(Collectors.toList());
    }

    /**
     * @param threads threads
     * @return each one's name and state, for an assertion's message ({@code assertEquals(List.of(), ...)})
     */
    public static List<String> describe(List<Thread> threads) {
        return threads.stream().map(t -> t.getName() + " (" + t.getState() + ")").collect(Collectors.toList());
    }
}
