#!/usr/bin/env bash
# tests/appservers/run.sh - the app-server tests (make test-appservers): a real Tomcat
# distribution (Maven Central, unpacked under java/appservers/target/) runs a web
# application over racaffinity.jar and 3 local PostgreSQL nodes, and a real WildFly runs
# XA transactions over two AffinityXADataSource data sources with a node killed between
# prepare and commit; see java/appservers/src/test/java/io/racaffinity/appservers/
# (TomcatRedeployTest, WildFlyXaRecoveryTest) and docs/java-ecosystem.md. TomcatContinuityTest
# kills and drains the nodes under a web session's traffic (docs/continuity.md, "Tomcat
# acceptance run"; its full size is make continuity-tomcat).
# java/run_module_tests.sh builds, installs the jar, starts the nodes.
#
# Environment: RACAFF_PG_BASE_PORT / RACAFF_PG_DIR (the nodes, as for pgnodes),
# RACAFF_TOMCAT_PORT (HTTP port of the first Tomcat, default 28880; the next one uses +1;
# below the ephemeral port range, where a client socket may hold a port),
# RACAFF_WILDFLY_PORT_OFFSET (WildFly's jboss.socket.binding.port-offset, default 20000:
# HTTP 28080, management 29990, recovery 24712, all below the ephemeral port range),
# RACAFF_MVN_OFFLINE=1 (mvn -o), MVN, CARGO; extra arguments go to mvn (e.g. -Dtest=...).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exec java/run_module_tests.sh java/appservers "-Dracaffinity.tomcat.port=${RACAFF_TOMCAT_PORT:-28880}" \
    "-Dracaffinity.wildfly.port-offset=${RACAFF_WILDFLY_PORT_OFFSET:-20000}" "$@"
