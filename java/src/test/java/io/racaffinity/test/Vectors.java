package io.racaffinity.test;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/** Reads the shared vectors in {@code tests/vectors/} (see rust/core/tests/vectors.rs for their semantics). */
public final class Vectors {
    private Vectors() {}

    public static JsonNode load(String file) throws IOException {
        return new ObjectMapper().readTree(PgNodes.repo().resolve("tests/vectors").resolve(file).toFile());
    }

    /** A byte string {@code {hex, utf8?, repeat?}}. */
    public static byte[] bytes(JsonNode v) {
        String hex = v.get("hex").asText();
        byte[] one = new byte[hex.length() / 2];
        for (int i = 0; i < one.length; i++) {
            one[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
        }
        if (v.has("utf8") && !new String(one, StandardCharsets.UTF_8).equals(v.get("utf8").asText())) {
            throw new IllegalStateException("vector utf8 spelling differs from its hex: " + v);
        }
        int n = v.has("repeat") ? v.get("repeat").asInt() : 1;
        byte[] out = new byte[one.length * n];
        for (int i = 0; i < n; i++) {
            System.arraycopy(one, 0, out, i * one.length, one.length);
        }
        return out;
    }

    public static String show(byte[] b) {
        if (b.length > 40) {
            return "<" + b.length + " bytes>";
        }
        StringBuilder sb = new StringBuilder("0x");
        for (byte x : b) {
            sb.append(String.format("%02x", x & 0xff));
        }
        return sb.toString();
    }

    /** Collects mismatches so one run reports all of them. */
    public static final class Run {
        public final String file;
        public int cases;
        public final List<String> failures = new ArrayList<>();

        public Run(String file) {
            this.file = file;
        }

        public void eq(String ctx, Object got, Object want) {
            cases++;
            if (!java.util.Objects.equals(got, want)) {
                failures.add(file + ": " + ctx + ": got " + got + ", want " + want);
            }
        }

        public void err(String ctx, Runnable call, Class<? extends Throwable> want) {
            cases++;
            try {
                call.run();
                failures.add(file + ": " + ctx + ": succeeded, want " + want.getSimpleName());
            } catch (Throwable t) {
                if (!want.isInstance(t)) {
                    failures.add(file + ": " + ctx + ": threw " + t + ", want " + want.getSimpleName());
                }
            }
        }

        public void fail(String ctx, Object msg) {
            failures.add(file + ": " + ctx + ": " + msg);
        }

        public String report() {
            return failures.size() + " vector failure(s):\n" + String.join("\n", failures);
        }
    }
}
