package io.racaffinity;

import java.util.Objects;

/**
 * Which of a request's tokens {@link Cluster#routeTokens(java.util.List)} chose, and how it routed. The choice
 * stands even when no node may serve the session now: the client keeps the chosen token for when a node is
 * back, and {@link #route()} throws the refusal.
 */
public final class TokenChoice {
    private final int index;
    private final String token;
    private final TokenRoute route;
    private final AffinityException refusal;

    TokenChoice(int index, String token, TokenRoute route, AffinityException refusal) {
        this.index = index;
        this.token = Objects.requireNonNull(token, "token");
        this.route = route;
        this.refusal = refusal;
    }

    /** @return the chosen token's position among the candidates, in the order given */
    public int index() {
        return index;
    }

    /** @return the chosen token, as the client sent it */
    public String token() {
        return token;
    }

    /**
     * @return the chosen token's route, as {@link Cluster#routeToken(String)} decides it
     * @throws StrictAffinityException in strict session mode when the token's primary is gone
     * @throws NoNodeAvailableException if no node may take the session
     */
    public TokenRoute route() {
        if (refusal != null) {
            throw refusal;
        }
        return route;
    }

    @Override
    public String toString() {
        return "TokenChoice[index=" + index + ", " + (refusal != null ? "refused: " + refusal.getMessage()
                : "route=" + route) + "]";
    }
}
