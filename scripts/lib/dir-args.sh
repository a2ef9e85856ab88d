# Sourced by the scripts that fill a cache directory. `dir_args NAME "$@"` reads `--dir DIR`
# into $dir (which the script set to its default before), answers -h/--help with the calling
# script's header comment and refuses anything else; `die MESSAGE` then stops with NAME's error.
dir_args() {
    script_name="$1"
    shift
    while [ $# -gt 0 ]; do
        case "$1" in
            --dir) dir="$2"; shift 2 ;;
            -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
            *) echo "$script_name: unknown argument '$1' (see --help)" >&2; exit 2 ;;
        esac
    done
}

die() { echo "$script_name: error: $*" >&2; exit 1; }
