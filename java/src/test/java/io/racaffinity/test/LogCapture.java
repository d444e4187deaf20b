package io.racaffinity.test;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import java.util.stream.Collectors;

/**
 * Records what the library logs (System.Logger goes to java.util.logging by default) while
 * open: {@code try (LogCapture log = new LogCapture()) { ...; log.at(Level.WARNING) }}.
 */
public final class LogCapture extends Handler implements AutoCloseable {
    private final Logger jul = Logger.getLogger("io.racaffinity");
    private final Level before = jul.getLevel();
    private final List<LogRecord> records = new CopyOnWriteArrayList<>();

    public LogCapture() {
        jul.setLevel(Level.ALL);
        jul.addHandler(this);
    }

    @Override
    public void publish(LogRecord r) {
        records.add(r);
    }

    @Override
    public void flush() {}

    @Override
    public void close() {
        jul.removeHandler(this);
        jul.setLevel(before);
    }

    /** @return the messages logged at exactly {@code level} */
    public List<String> at(Level level) {
        return records.stream().filter(r -> r.getLevel().equals(level)).map(LogRecord::getMessage)
                .collect(Collectors.toList());
    }

    /** @return every record so far, live (later records appear in it) */
    public List<LogRecord> records() {
        return records;
    }

    /** @return every message with its level, for assertion messages */
    public String all() {
        return records.stream().map(r -> r.getLevel() + " " + r.getMessage()).collect(Collectors.joining("\n"));
    }
}
