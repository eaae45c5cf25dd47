"""The `phalanx` command line. The cluster commands (start, status, stop)
come with the cluster issue; `phalanx version` works now."""
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["version"]:
        import phalanx
        print(phalanx.__version__)
        return 0
    print("usage: phalanx version", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
