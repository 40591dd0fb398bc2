# ptyhub's shell integration for a POSIX sh (busybox ash, dash): the user's own $ENV file
# first, then marks in the prompt: the previous command's end with its exit code (OSC 133 D),
# the working directory (OSC 7), the prompt (133 A and B). A POSIX shell has no hook before a
# command runs, so the broker takes the command line from the screen when it is entered.
rm -rf -- "$PTYHUB_SHELL_DIR" 2>/dev/null
unset PTYHUB_SHELL_DIR
if [ -n "${PTYHUB_SHELL_ENV-}" ]; then
    ENV=$PTYHUB_SHELL_ENV
    unset PTYHUB_SHELL_ENV
    [ -r "$ENV" ] && . "$ENV"
else
    unset ENV
fi

if [ -z "${__ptyhub_integrated-}" ]; then
    __ptyhub_integrated=1
    # Runs in the prompt's command substitution: prints the marks, changes nothing.
    __ptyhub_prompt() {
        printf '\033]133;D;%s\007\033]7;file://%s%s\007\033]133;A\007' \
            "$1" "${HOSTNAME:-}" "$(printf '%s' "$PWD" | sed 's/%/%25/g')"
    }
    __ptyhub_input_start=$(printf '\033]133;B\007')
    case $(readlink /proc/$$/exe 2>/dev/null) in
    *busybox*)
        # busybox's line editor counts the marks as text unless they sit in \[ \].
        PS1='\[$(__ptyhub_prompt $?)\]'"${PS1:-\\w \\$ }"'\['"$__ptyhub_input_start"'\]'
        ;;
    *)
        PS1='$(__ptyhub_prompt $?)'"${PS1:-$ }$__ptyhub_input_start"
        ;;
    esac
fi
