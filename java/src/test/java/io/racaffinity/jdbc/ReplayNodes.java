package io.racaffinity.jdbc;

import static io.racaffinity.jdbc.ReplayFixture.resetTable;

import io.racaffinity.test.PgNodes;
import io.racaffinity.test.Pools;
import java.sql.SQLException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The life of a replay test on the three local nodes ({@link ReplayTest}, {@link ReplayGuardsTest},
 * {@link ReplayCallsTest}, {@link ReplayCountsTest}, {@link OutcomeCheckDeadlineTest}):
 * {@code java_req} emptied before each test (of every row, or of a class's own ids), and the node
 * pools the test opened (with the data sources they own) closed after it, whatever it asserted.
 */
@ExtendWith(PgNodes.class)
abstract class ReplayNodes {
    /** The test's node pools: each test opens its own (plain, or node 1's through a proxy). */
    Pools pools;
    private final String idsLike;

    /** Empties {@code java_req} of every row before each test. */
    ReplayNodes() {
        this(null);
    }

    /** Empties {@code java_req} of the ids {@code LIKE idsLike} before each test. */
    ReplayNodes(String idsLike) {
        this.idsLike = idsLike;
    }

    @BeforeEach
    void table() throws SQLException {
        resetTable(idsLike);
    }

    @AfterEach
    void close() {
        if (pools != null) {
            pools.close();
        }
    }

    /** {@link ReplayFixture#dataSource(Pools, String, boolean)} over the test's {@link #pools}. */
    AffinityDataSource ds(String name, boolean replay) {
        return ReplayFixture.dataSource(pools, name, replay);
    }
}
