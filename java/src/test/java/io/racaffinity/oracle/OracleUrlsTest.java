package io.racaffinity.oracle;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.racaffinity.InvalidArgumentException;
import io.racaffinity.test.Vectors;
import io.racaffinity.test.Vectors.Run;
import org.junit.jupiter.api.Test;

class OracleUrlsTest {
    @Test
    void buildsTheSeedsPerInstanceUrlsExactly() {
        assertEquals("jdbc:oracle:thin:@(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=MYDBHOST1)(PORT=1522)))"
                        + "(CONNECT_DATA=(SERVICE_NAME=MYDB)(INSTANCE_NAME=MYDB1)))",
                OracleUrls.descriptorUrl("MYDBHOST1", 1522, "MYDB", "MYDB1"));
        assertEquals("jdbc:oracle:thin:@//MYDBHOST1:1522/MYDB/MYDB1",
                OracleUrls.easyConnectUrl("MYDBHOST1", 1522, "MYDB", "MYDB1"));
        assertEquals("(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=MYDBHOST1)(PORT=1522)))"
                        + "(CONNECT_DATA=(SERVICE_NAME=MYDB)(INSTANCE_NAME=MYDB1)))",
                OracleUrls.descriptor("MYDBHOST1", 1522, "MYDB", "MYDB1"));
        assertEquals("MYDBHOST1:1522/MYDB/MYDB1", OracleUrls.easyConnect("MYDBHOST1", 1522, "MYDB", "MYDB1"));
    }

    @Test
    void refusesValuesThatWouldBreakTheDescriptor() {
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                () -> OracleUrls.descriptorUrl("MYDBHOST1", 1522, "MYDB", "X)(INSTANCE_NAME=Y"));
        assertTrue(e.getMessage().contains("instance"), e.getMessage());
        assertThrows(InvalidArgumentException.class, () -> OracleUrls.easyConnectUrl("h", 0, "MYDB", "MYDB1"));
        assertThrows(InvalidArgumentException.class, () -> OracleUrls.easyConnectUrl("h", 65536, "MYDB", "MYDB1"));
        assertThrows(InvalidArgumentException.class, () -> OracleUrls.easyConnectUrl("h", -1, "MYDB", "MYDB1"));
        assertThrows(NullPointerException.class, () -> OracleUrls.easyConnectUrl(null, 1522, "MYDB", "MYDB1"));
    }

    @Test
    void connectVectorsMatch() throws Exception {
        JsonNode top = Vectors.load("connect.json");
        Run run = new Run("connect.json");
        for (JsonNode c : top.get("build")) {
            String h = c.get("host").asText();
            int p = c.get("port").asInt();
            String s = c.get("service").asText();
            String i = c.get("instance").asText();
            JsonNode e = c.get("expect");
            String ctx = h + ":" + p + "/" + s + "/" + i;
            run.eq(ctx + " descriptor", OracleUrls.descriptor(h, p, s, i), e.get("descriptor").asText());
            run.eq(ctx + " easy_connect", OracleUrls.easyConnect(h, p, s, i), e.get("easy_connect").asText());
            run.eq(ctx + " jdbc_descriptor_url", OracleUrls.descriptorUrl(h, p, s, i),
                    e.get("jdbc_descriptor_url").asText());
            run.eq(ctx + " jdbc_easy_connect_url", OracleUrls.easyConnectUrl(h, p, s, i),
                    e.get("jdbc_easy_connect_url").asText());
        }
        for (JsonNode c : top.get("build_errors")) {
            String h = c.get("host").asText();
            int p = c.get("port").asInt();
            String s = c.get("service").asText();
            String i = c.get("instance").asText();
            assertEquals("InvalidArgument", c.get("error").asText());
            String ctx = h + ":" + p + "/" + s + "/" + i;
            run.err(ctx + " descriptorUrl", () -> OracleUrls.descriptorUrl(h, p, s, i), InvalidArgumentException.class);
            run.err(ctx + " easyConnectUrl", () -> OracleUrls.easyConnectUrl(h, p, s, i),
                    InvalidArgumentException.class);
        }
        assertTrue(run.failures.isEmpty(), run.report());
        assertTrue(run.cases >= 60, "only " + run.cases + " cases");
    }
}
