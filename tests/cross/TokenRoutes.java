import io.racaffinity.Cluster;
import io.racaffinity.NodeState;
import io.racaffinity.TokenRoute;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * The Java third of the cross-language token test (see token_routes.c: the
 * same arguments, phases and output), through {@link Cluster#routeToken}.
 */
public final class TokenRoutes {
    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: TokenRoutes CONFIG_FILE TOKENS_FILE DOWN1 DOWN2");
            System.exit(2);
        }
        String config = Files.readString(Path.of(args[0]), StandardCharsets.UTF_8);
        List<String> held = new ArrayList<>(Files.readAllLines(Path.of(args[1]), StandardCharsets.UTF_8));
        held.removeIf(String::isEmpty);
        NodeState[][] states = {
            {NodeState.UP, NodeState.UP},
            {NodeState.DOWN, NodeState.UP},
            {NodeState.DOWN, NodeState.DOWN},
            {NodeState.UP, NodeState.UP},
        };
        StringBuilder out = new StringBuilder();
        try (Cluster c = Cluster.fromConfig(config)) {
            for (int phase = 0; phase < 4; phase++) {
                c.setNodeState(args[2], states[phase][0]);
                c.setNodeState(args[3], states[phase][1]);
                for (int i = 0; i < held.size(); i++) {
                    TokenRoute r = c.routeToken(held.get(i));
                    held.set(i, r.token().orElse(held.get(i)));
                    out.append(phase).append(' ').append(r.route().nodeName()).append(' ').append(held.get(i))
                            .append('\n');
                }
            }
        }
        System.out.print(out);
    }
}
