//! The terminal WebSocket's close codes that are about the socket itself rather than its
//! session: a text frame over 1 MiB closes 1009 like a binary one, a token that is no
//! credential closes 4001, and a socket past its credential's streams closes 4029 while another
//! credential's socket opens and a slot given back is taken again.

use ptyhub_test_support::stack::TestStack;
use serde_json::json;

use super::support::{PATIENCE, Terminal, eventually};

fn default_path(stack: &TestStack) -> String {
    format!("/ws/tool-instances/{}/terminal", stack.instance_id)
}

#[tokio::test]
async fn a_text_frame_over_one_mebibyte_closes_1009_and_types_nothing() {
    let stack = TestStack::builder().start().await;
    let mut terminal = Terminal::open(&stack, &default_path(&stack)).await;
    let session_id = terminal.connected().await["session"]["id"]
        .as_str()
        .expect("a session id")
        .to_owned();
    // A well-formed input frame whose JSON is one byte over the limit: only its size is wrong.
    let envelope = json!({"type": "input", "data": ""}).to_string().len();
    let data = "x".repeat(ptyhub_wire::limits::MAX_FRAME_BYTES + 1 - envelope);
    terminal
        .send_json(json!({"type": "input", "data": data}))
        .await;
    let closed = tokio::time::timeout(PATIENCE, terminal.read_until_closed())
        .await
        .expect("the oversized frame closes the socket");
    assert_eq!(closed.code, 1009, "{closed:?}");

    // The session lives on, and none of the frame reached its shell.
    let mut again = Terminal::open(&stack, &format!("{}/{session_id}", default_path(&stack))).await;
    again.connected().await;
    again.send_input("echo alive-$((6*7))\n").await;
    again.read_until_output("alive-42").await;
    assert!(
        !again.output.windows(64).any(|window| window == [b'x'; 64]),
        "a byte of the oversized frame was typed: {}",
        again.output_tail()
    );
    stack.shutdown().await;
}

#[tokio::test]
async fn a_garbage_token_closes_4001_and_creates_nothing() {
    let stack = TestStack::builder().start().await;
    for garbage in ["not-a-credential", "eyJub3QiOiJhIGp3dCJ9.e30.c2lnbmF0dXJl"] {
        let mut refused = Terminal::open_as(
            &stack,
            &format!("{}?client_id=garbage", default_path(&stack)),
            garbage,
        )
        .await;
        let closed = refused.read_until_closed().await;
        assert_eq!(closed.code, 4001, "token {garbage:?}: {closed:?}");
        assert!(refused.texts.is_empty(), "{:?}", refused.texts);
    }
    let sessions = super::support::list_sessions(&stack, &stack.instance_id, true).await;
    assert!(sessions.is_empty(), "a refused socket created {sessions:?}");
    stack.shutdown().await;
}

#[tokio::test]
async fn a_socket_past_its_credentials_streams_closes_4029_and_others_still_open() {
    let stack = TestStack::builder()
        .max_streams_per_principal(2)
        .start()
        .await;
    let tab = |name: &str| format!("{}?client_id={name}", default_path(&stack));
    let mut first = Terminal::open(&stack, &tab("one")).await;
    first.connected().await;
    let mut second = Terminal::open(&stack, &tab("two")).await;
    second.connected().await;

    let mut third = Terminal::open(&stack, &tab("three")).await;
    let closed = third.read_until_closed().await;
    assert_eq!(closed.code, 4029, "{closed:?}");
    assert!(third.texts.is_empty(), "{:?}", third.texts);

    // The limit is per credential: another principal's socket opens.
    let bob = stack.jwt("bob", &["*"], false);
    let mut bobs = Terminal::open_as(&stack, &tab("bobs"), &bob).await;
    bobs.connected().await;

    // A socket that ends gives its slot back.
    first.close_at_once().await;
    eventually("a closed socket's slot is free again", || async {
        let mut retry = Terminal::open(&stack, &tab("three")).await;
        match retry
            .next_frame(tokio::time::Instant::now() + PATIENCE)
            .await
        {
            super::support::Frame::Text(frame) if frame["status"] == "connected" => Some(()),
            super::support::Frame::Closed(closed) => {
                assert_eq!(closed.code, 4029, "{closed:?}");
                None
            }
            other => panic!("neither connected nor 4029: {other:?}"),
        }
    })
    .await;
    stack.shutdown().await;
}
