#!/usr/bin/env bash
# tests/dist/run.sh [REPO] - the Java artifacts as a user gets them (make test-dist).
#
# REPO (default target/dist/maven, written by `make dist`) must hold racaffinity,
# racaffinity-micrometer, racaffinity-spring-boot-starter and racaffinity-simplefan, each
# with its pom, jar, sources and javadoc jars and their checksums, and racaffinity-bom.
# Then tests/dist/app is copied into a new directory outside the checkout and built with
# Maven against REPO and no reactor; it opens an AffinityDataSource (SELECT 1), binds
# AffinityMetrics to a Micrometer registry and starts a Spring Boot application with the
# starter, against local node 1 (RACAFF_NODE1_URL: run under tests/cluster/with-nodes).
#
# Where the build gets its artifacts (docs/java-ecosystem.md, "Getting the artifacts"):
# - its own local repository, target/dist-test/m2, with io/racaffinity deleted before each
#   run: the racaffinity artifacts can only come from REPO, never from ~/.m2, which
#   `make install-java`, the module tests and other checkouts write to;
# - everything else through a mirror of Maven Central at a file:// view of ~/.m2/repository
#   (symlinks, io/racaffinity left out), read only: no download in the usual case, and
#   nothing this test does changes ~/.m2. The view can only serve what ~/.m2 has, so the
#   first run (per version of app/pom.xml) builds the project once with ~/.m2 and Maven
#   Central to fill it (about 20 s online); target/dist-test/prefetched-* marks that done.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
repo=$(realpath "${1:-$root/target/dist/maven}")
version=${RACAFF_VERSION:-$(sed -n 's|^  <version>\(.*\)</version>|\1|p' "$root/java/bom/pom.xml" | head -1)}
MVN=${MVN:-mvn}
state=$root/target/dist-test
user_m2=${RACAFF_USER_M2:-$HOME/.m2/repository}
: "${RACAFF_NODE1_URL:?not set: run under tests/cluster/with-nodes 1}"

fail() { echo "test-dist: FAIL: $*" >&2; exit 1; }
[[ -d $repo ]] || fail "$repo does not exist (make dist)"

# 1. A user's project, outside the checkout.
work=$(mktemp -d "${TMPDIR:-/tmp}/racaffinity-dist-app.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -r "$root/tests/dist/app/." "$work/"
sed -i -e "s|@REPO@|$repo|" -e "s|@VERSION@|$version|" "$work/pom.xml"
goals=(compile org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath -Dmdep.outputFile=cp.txt)

mkdir -p "$state"
stamp=$state/prefetched-$(sha1sum "$root/tests/dist/app/pom.xml" | cut -c1-12)
prefetch() {
    echo "test-dist: resolving the project's Maven Central dependencies into $user_m2 (online)"
    "$MVN" -B -q -f "$work" -Dmaven.repo.local="$user_m2" "${goals[@]}"
    rm -rf "$work/target" "$work/cp.txt"
    touch "$stamp"
}
[[ -e $stamp ]] || prefetch

view=$state/central-view
rm -rf "$view" "$state/m2/io/racaffinity"
mkdir -p "$view/io" "$state/m2"
for d in "$user_m2"/*; do [[ $(basename "$d") == io ]] || ln -s "$d" "$view/"; done
for d in "$user_m2"/io/*; do [[ $(basename "$d") == racaffinity ]] || ln -s "$d" "$view/io/"; done
cat > "$state/settings.xml" <<XML
<settings>
  <localRepository>$state/m2</localRepository>
  <mirrors>
    <mirror>
      <id>user-m2-view</id>
      <mirrorOf>*,!racaffinity-dist</mirrorOf>
      <url>file://$view</url>
    </mirror>
  </mirrors>
</settings>
XML
build() { "$MVN" -B -q -f "$work" -s "$state/settings.xml" "${goals[@]}" >"$state/build.log" 2>&1; }
if ! build; then
    # ~/.m2 lost something the view served before (a cleaned cache): fill it again, once.
    if grep -q "in user-m2-view" "$state/build.log" && prefetch && build; then :; else
        sed 's/\x1b\[[0-9;]*m//g' "$state/build.log" | grep -v '^\[ERROR\] *$' | head -20 >&2
        fail "the project did not build against $repo"
    fi
fi
for a in racaffinity racaffinity-micrometer racaffinity-spring-boot-starter; do
    got=$state/m2/io/racaffinity/$a/$version/$a-$version.jar
    cmp -s "$got" "$repo/io/racaffinity/$a/$version/$a-$version.jar" || fail "$a did not come from $repo"
done

# 2. Run it.
(cd "$work" && java -cp "target/classes:$(cat cp.txt)" example.Main) || fail "the project's checks failed"

# 3. The repository's layout: what a Maven or Gradle build and an IDE look for.
python3 - "$repo" "$version" <<'PY' || fail "the repository $repo is incomplete (above)"
import sys, zipfile, hashlib
from pathlib import Path
repo, v = Path(sys.argv[1]), sys.argv[2]
bad = []
def need(p: Path) -> bool:
    if not p.is_file():
        bad.append(f"missing {p.relative_to(repo)}")
        return False
    sha = p.with_name(p.name + ".sha1")
    if not sha.is_file() or sha.read_text().split()[0] != hashlib.sha1(p.read_bytes()).hexdigest():
        bad.append(f"no matching checksum {sha.relative_to(repo)}")
    return True
for a in ("racaffinity", "racaffinity-micrometer", "racaffinity-spring-boot-starter", "racaffinity-simplefan"):
    d = repo / "io/racaffinity" / a / v
    need(d / f"{a}-{v}.pom")
    for suffix, must in (("", ".class"), ("-sources", ".java"), ("-javadoc", "index.html")):
        j = d / f"{a}-{v}{suffix}.jar"
        if need(j) and not any(n.endswith(must) for n in zipfile.ZipFile(j).namelist()):
            bad.append(f"{j.relative_to(repo)} has no {must}")
    need(repo / "io/racaffinity" / a / "maven-metadata.xml")
need(repo / f"io/racaffinity/racaffinity-bom/{v}/racaffinity-bom-{v}.pom")
core = repo / f"io/racaffinity/racaffinity/{v}/racaffinity-{v}.jar"
if core.is_file() and "io/racaffinity/native/linux-x86_64/libracaffinity.so" not in zipfile.ZipFile(core).namelist():
    bad.append(f"{core.name} does not bundle the native library")
for b in bad:
    print("  " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
echo "test-dist: $repo holds the 4 artifacts (pom, jar, sources, javadoc, sha1) and racaffinity-bom $version"

echo "test-dist: a Maven project outside the checkout built against $repo only and ran the core jar, the Micrometer binder and the Spring Boot starter"
