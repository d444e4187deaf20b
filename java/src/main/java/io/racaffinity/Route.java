package io.racaffinity;

/**
 * A routing decision: the node (dense id in config order, and its instance
 * name) and how it was chosen.
 *
 * @param node node id: index of the node in config order (added nodes follow; ids are never reused)
 * @param nodeName the node's (RAC instance) name, as spelled in the config
 * @param kind how the node was chosen
 */
public record Route(int node, String nodeName, RouteKind kind) {}
