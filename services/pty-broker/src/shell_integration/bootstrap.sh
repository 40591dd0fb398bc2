# ptyhub: starts an interactive shell with its integration (see mod.rs). Run as
# `/bin/sh -c <this> <shell> <its arguments>...` with the integration's script in
# PTYHUB_SHELL_SCRIPT and the shell's kind in PTYHUB_SHELL_KIND. The script goes to a private
# directory the shell removes once it has read it; where that cannot be made, the shell starts
# as it would have without integration.
kind=$PTYHUB_SHELL_KIND
script=$PTYHUB_SHELL_SCRIPT
unset PTYHUB_SHELL_KIND PTYHUB_SHELL_SCRIPT
dir=$(umask 077 && mktemp -d "${TMPDIR:-/tmp}/ptyhub-shell.XXXXXX" 2>/dev/null) || exec "$0" "$@"
PTYHUB_SHELL_DIR=$dir
export PTYHUB_SHELL_DIR
case $kind in
bash)
    printf '%s\n' "$script" >"$dir/bashrc" || exec "$0" "$@"
    # A login shell reads no rc file; the script reads the login files itself instead.
    for arg do
        shift
        case $arg in
        -l | --login) PTYHUB_SHELL_LOGIN=1 && export PTYHUB_SHELL_LOGIN ;;
        *) set -- "$@" "$arg" ;;
        esac
    done
    exec "$0" --rcfile "$dir/bashrc" "$@"
    ;;
sh)
    printf '%s\n' "$script" >"$dir/env" || exec "$0" "$@"
    if [ -n "${ENV-}" ]; then
        PTYHUB_SHELL_ENV=$ENV
        export PTYHUB_SHELL_ENV
    fi
    ENV=$dir/env
    export ENV
    exec "$0" "$@"
    ;;
zsh)
    # zsh reads its files from $ZDOTDIR: each of ours reads the user's and hands on, and the
    # last (.zshrc) puts ZDOTDIR back.
    PTYHUB_USER_ZDOTDIR=${ZDOTDIR:-$HOME}
    export PTYHUB_USER_ZDOTDIR
    for file in .zshenv .zprofile; do
        printf '%s\n' \
            "ZDOTDIR=\$PTYHUB_USER_ZDOTDIR" \
            "[[ -r \$ZDOTDIR/$file ]] && source \$ZDOTDIR/$file" \
            "PTYHUB_USER_ZDOTDIR=\$ZDOTDIR" \
            "ZDOTDIR=\$PTYHUB_SHELL_DIR" >"$dir/$file" || exec "$0" "$@"
    done
    printf '%s\n' "$script" >"$dir/.zshrc" || exec "$0" "$@"
    ZDOTDIR=$dir
    export ZDOTDIR
    exec "$0" "$@"
    ;;
fish)
    printf '%s\n' "$script" >"$dir/init.fish" || exec "$0" "$@"
    exec "$0" --init-command "source $dir/init.fish" "$@"
    ;;
esac
exec "$0" "$@"
