#!/usr/bin/env bash
# Real training pairs from typeset PDF manuals of Debian packages (+ the fonts for synthetic pages).
#
#   sudo nice -n 10 scripts/get_training_data.sh                  # -> data/real-pdf
#   scripts/get_training_data.sh /tmp/real --dpi 100              # other folder; extra flags go to pdf-pairs
#   MAX_PAGES_PER_PDF=30 scripts/get_training_data.sh             # longer runs of pages per manual
#   DOC_PACKAGES="texlive-fonts-extra-doc texlive-publishers-doc" scripts/get_training_data.sh data/more
#
# 1. installs DOC_PACKAGES (TeX Live documentation: LaTeX manuals, ltnews, package guides, font samples, MetaPost;
#    about 240 MB) and FONT_PACKAGES (apt-get update only when the package lists are missing);
# 2. collects the PDFs that DOC_PACKAGES ship (dpkg -L; *.pdf.gz unpacked to OUT/.work/), and only those: HELD-OUT
#    PDFs never enter. The PDFs of the base system image are kept for evaluation, so a candidate is dropped when it
#    is under HELD_OUT_DIRS, when any package outside DOC_PACKAGES also owns its path, or when its content equals
#    (sha256) any PDF of a package outside DOC_PACKAGES or under HELD_OUT_DIRS (font packages ship PDFs too);
# 3. runs `unlimited-ocr data pdf-pairs` on them into OUT (data.jsonl, manifest.json, pages/), with one seeded run of
#    at most MAX_PAGES_PER_PDF pages per PDF so one long manual does not dominate; PNGs no longer referenced by
#    data.jsonl (an earlier run's) are removed;
# 4. writes OUT/sources.tsv (package, pdf) and OUT/licences.tsv (package, version, licence summary: the first
#    "License:" lines of /usr/share/doc/PKG/copyright; TeX Live packages, whose copyright file is not in that
#    format, get a tally of the licences in their Licenses.gz of the TeX packages whose documentation they ship).
#
# Idempotent: installed packages are not reinstalled, data.jsonl/manifest.json are replaced atomically. Needs root
# (or sudo) for apt. Exit status: that of pdf-pairs (1 when a PDF could not be read; the others are written).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$REPO/data/real-pdf}
shift || true
OUT=$(realpath -m "$OUT")
MAX_PAGES_PER_PDF=${MAX_PAGES_PER_PDF:-8}
DPI=${DPI:-144}

# DOC_PACKAGES="pkg ..." replaces the default set (e.g. texlive-fonts-extra-doc: samples of hundreds of fonts).
# shellcheck disable=SC2206  # split on whitespace on purpose: package names have none
DOC_PACKAGES=(${DOC_PACKAGES:-texlive-latex-base-doc texlive-latex-recommended-doc texlive-fonts-recommended-doc
  texlive-humanities-doc texlive-metapost-doc})
mapfile -t FONT_PACKAGES < <(bash "$REPO/scripts/install_fonts.sh" --list)  # one list of font packages
HELD_OUT_DIRS=(/usr/share/doc/libtasn1-doc/ /usr/share/doc/shared-mime-info/)

if [ -x "$REPO/.venv/bin/unlimited-ocr" ]; then
  UOCR=("$REPO/.venv/bin/unlimited-ocr"); PYTHON=$REPO/.venv/bin/python
else
  UOCR=(unlimited-ocr); PYTHON=${PYTHON:-python3}
fi
SUDO=(); [ "$(id -u)" -eq 0 ] || SUDO=(sudo)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# 1. packages ------------------------------------------------------------------------------------------------
if ! ls /var/lib/apt/lists/ 2>/dev/null | grep -q '_Packages'; then
  "${SUDO[@]}" apt-get update -q
fi
missing=()
for package in "${DOC_PACKAGES[@]}" "${FONT_PACKAGES[@]}"; do
  installed "$package" && continue
  if apt-cache policy "$package" 2>/dev/null | grep -q 'Candidate: [^(]'; then
    missing+=("$package")
  else
    echo "warning: $package is not available from apt; skipped" >&2
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=900 "${missing[@]}"
fi
for package in "${DOC_PACKAGES[@]}"; do
  installed "$package" || { echo "error: $package is not installed" >&2; exit 2; }
done

# 2. the PDFs of DOC_PACKAGES, minus anything held out -----------------------------------------------------------
mkdir -p "$OUT/.work/gunzipped"
declare -A is_doc_package=()
for package in "${DOC_PACKAGES[@]}"; do is_doc_package[$package]=1; done

# PDFs owned by any other installed package (the base image's, the font packages', texlive-base's ...)
foreign_list="$OUT/.work/foreign-pdfs.txt"
: > "$foreign_list"
for list in /var/lib/dpkg/info/*.list; do
  name=$(basename "$list" .list); name=${name%%:*}
  [ -n "${is_doc_package[$name]:-}" ] && continue
  grep -E '\.pdf(\.gz)?$' "$list" >> "$foreign_list" || true
done
for dir in "${HELD_OUT_DIRS[@]}"; do
  [ -d "$dir" ] && find "$dir" -type f \( -name '*.pdf' -o -name '*.pdf.gz' \) >> "$foreign_list"
done
sort -u -o "$foreign_list" "$foreign_list"
declare -A foreign_path=() foreign_hash=()
while IFS= read -r path; do
  foreign_path[$path]=1
  [ -f "$path" ] || continue
  case "$path" in
    *.gz) hash=$(gzip -dc "$path" 2>/dev/null | sha256sum | cut -d' ' -f1) || continue ;;
    *) hash=$(sha256sum "$path" | cut -d' ' -f1) ;;
  esac
  foreign_hash[$hash]=1
done < "$foreign_list"

pdfs=()
excluded=0
sources_tmp="$OUT/sources.tsv.tmp"
printf 'package\tpdf\n' > "$sources_tmp"
for package in "${DOC_PACKAGES[@]}"; do
  while IFS= read -r path; do
    [ -f "$path" ] || continue
    held_out=""
    for dir in "${HELD_OUT_DIRS[@]}"; do
      case "$path" in "$dir"*) held_out=1 ;; esac
    done
    [ -n "${foreign_path[$path]:-}" ] && held_out=1
    if [[ "$path" == *.gz ]]; then
      target="$OUT/.work/gunzipped/$package/$(echo "${path#/}" | tr '/' '_')"
      target=${target%.gz}
      mkdir -p "$(dirname "$target")"
      [ -s "$target" ] && [ "$target" -nt "$path" ] || { gzip -dc "$path" > "$target.tmp" && mv "$target.tmp" "$target"; }
      file=$target
    else
      file=$path
    fi
    [ -n "${foreign_hash[$(sha256sum "$file" | cut -d' ' -f1)]:-}" ] && held_out=1
    if [ -n "$held_out" ]; then
      excluded=$((excluded + 1)); echo "held out: $path"; continue
    fi
    pdfs+=("$file")
    printf '%s\t%s\n' "$package" "$path" >> "$sources_tmp"
  done < <(dpkg -L "$package" | grep -E '\.pdf(\.gz)?$' | sort)
done
mv "$sources_tmp" "$OUT/sources.tsv"
echo "PDFs: ${#pdfs[@]} from ${#DOC_PACKAGES[@]} packages (${excluded} held out)"
[ ${#pdfs[@]} -gt 0 ] || { echo "error: no PDF to use" >&2; exit 1; }

# 4. licences (before the long part, so they are there whatever happens) -----------------------------------------
"$PYTHON" - "$OUT/licences.tsv" "${DOC_PACKAGES[@]}" "${FONT_PACKAGES[@]}" <<'PY'
import collections, gzip, os, re, subprocess, sys
out, packages = sys.argv[1], sys.argv[2:]
rows = ["package\tversion\tlicence"]
for package in packages:
    query = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
    if query.returncode != 0:
        continue
    doc = f"/usr/share/doc/{package}"
    licences = []
    try:
        with open(f"{doc}/copyright", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("License:"):
                    licence = line.split(":", 1)[1].strip()
                    if licence and licence not in licences:
                        licences.append(licence)
    except OSError:
        pass
    summary = "; ".join(licences[:6])
    if not summary and os.path.exists(f"{doc}/Licenses.gz"):
        # TeX Live: "name: licence" then the name's paths; count the TeX packages whose docs this package ships.
        shipped = set(subprocess.run(["dpkg", "-L", package], capture_output=True, text=True).stdout.split("\n"))
        shipped_dirs = {os.path.dirname(path) for path in shipped}
        tally, current = collections.Counter(), None
        with gzip.open(f"{doc}/Licenses.gz", "rt", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                header = re.match(r"^(\S+): (.+)$", line)
                if header:
                    current = (header.group(1), header.group(2).strip())
                    continue
                match = re.match(r"^texmf-dist/doc/(.+)/\*$", line.strip())
                if current and match and f"/usr/share/doc/texlive-doc/{match.group(1)}" in shipped_dirs:
                    tally[current] += 1
                    current = None  # count each TeX package once
        by_licence = collections.Counter(licence for _, licence in tally)
        summary = f"TeX Live, {len(tally)} TeX packages: " + ", ".join(f"{l} {n}" for l, n in by_licence.most_common())
    rows.append(f"{package}\t{query.stdout}\t{summary or 'see ' + doc + '/copyright'}")
with open(out + ".tmp", "w", encoding="utf-8") as handle:
    handle.write("\n".join(rows) + "\n")
os.replace(out + ".tmp", out)
PY

# 3. the pairs -------------------------------------------------------------------------------------------------
rc=0
"${UOCR[@]}" data pdf-pairs "${pdfs[@]}" -o "$OUT" --dpi "$DPI" --max-pages-per-pdf "$MAX_PAGES_PER_PDF" \
  --multi-fraction 0.1 --max-doc-pages 20 --min-chars 200 --seed 0 "$@" || rc=$?
if [ -s "$OUT/data.jsonl" ] || [ "$rc" -eq 0 ]; then
  "$PYTHON" - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
used = {image for line in (out / "data.jsonl").open(encoding="utf-8") if line.strip()
        for image in json.loads(line)["images"]}
stale = [p for p in (out / "pages").glob("*.png") if f"pages/{p.name}" not in used]
for path in stale:
    path.unlink()
print(f"{len(used)} page images in {out / 'pages'}" + (f" ({len(stale)} stale ones removed)" if stale else ""))
PY
fi
echo "dataset: $OUT ($(du -sh --exclude=.work "$OUT" | cut -f1)); licences: $OUT/licences.tsv"
exit "$rc"
