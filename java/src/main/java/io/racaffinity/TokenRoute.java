package io.racaffinity;

import java.util.Optional;

/**
 * What {@link Cluster#routeToken(String)} decided for one request.
 *
 * @param route the node for this request
 * @param token the rewritten token when the routing data changed (a promotion,
 *     a new backup); empty when the client's token still holds
 */
public record TokenRoute(Route route, Optional<String> token) {
    /** @return whether the client must be sent the rewritten token */
    public boolean changed() {
        return token.isPresent();
    }
}
