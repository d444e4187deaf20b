package io.racaffinity;

import java.util.Optional;
import java.util.OptionalInt;

/**
 * A session's routing data (seed 001, WebLogic): the node serving it and the
 * node that takes over when it is gone, on another machine whenever the
 * topology has one.
 *
 * @param primary the primary's node id
 * @param primaryName the primary's (instance) name
 * @param backup the backup's node id; empty when no other node is usable
 * @param backupName the backup's name; empty when there is none
 */
public record SessionRouting(int primary, String primaryName, OptionalInt backup, Optional<String> backupName) {}
