#!/usr/bin/env bash
# Fonts for the synthetic training pages, from Debian packages (licences: see the model card; all free to use and
# redistribute: OFL, GPL with font exception, LPPL/GUST, Apache-2.0, Bitstream Vera). Idempotent; needs root.
# data/fonts.py discovers them under /usr/share/fonts (family "system"), a stable 10% of families held out.
#   bash scripts/install_fonts.sh          # install what is missing
#   bash scripts/install_fonts.sh --list   # print the package names (scripts/get_training_data.sh lists licences)
set -euo pipefail
PACKAGES=(fonts-urw-base35 fonts-liberation2 fonts-dejavu-extra fonts-crosextra-carlito fonts-crosextra-caladea
  fonts-ebgaramond fonts-linuxlibertine fonts-texgyre fonts-freefont-ttf fonts-open-sans fonts-lato
  fonts-cantarell fonts-inconsolata fonts-firacode fonts-noto-core fonts-go fonts-croscore fonts-sil-gentium
  fonts-sil-charis fonts-cmu fonts-lmodern fonts-courier-prime fonts-adf-accanthis fonts-junicode)
if [ "${1:-}" = "--list" ]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi
missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ -n "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v lock)" ] || apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
echo "fonts: ${#PACKAGES[@]} packages installed"
