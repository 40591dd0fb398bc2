//! The broker's own spawn policy against real targets: in a container of the test image (users
//! `root` and `tester`) root is refused by default whether named, numbered or implied, and
//! `--allow-containers` rules pick containers by name and label; on the local runtime
//! `--deny-user` refuses the broker's own user. Every refusal is PERMISSION_DENIED with a
//! message that names the rule, and leaves no session behind.

use ptyhub_proto::broker::v1 as pb;
use tonic::Code;

use crate::support::{Backend, Configure, TestBroker, authorized};

async fn sessions(broker: &TestBroker) -> anyhow::Result<Vec<pb::SessionInfo>> {
    Ok(broker
        .client
        .clone()
        .list(authorized(pb::ListRequest {}))
        .await?
        .into_inner()
        .sessions)
}

/// A Docker broker with the policy's defaults (the scenario tests opt out of them).
async fn docker_broker(configure: Configure) -> anyhow::Result<Option<TestBroker>> {
    if !ptyhub_test_support::require(ptyhub_test_support::Requirement::Docker) {
        return Ok(None);
    }
    let broker = TestBroker::start_with(
        Backend::Docker,
        Box::new(move |config| {
            config.policy.allow_root = false;
            configure(config);
        }),
    )
    .await?;
    Ok(Some(broker))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_in_a_container_is_refused_by_default_however_it_is_named() -> anyhow::Result<()> {
    let Some(broker) = docker_broker(Box::new(|_| {})).await? else {
        return Ok(());
    };
    // No user: the container's configured one, which for the test image is root.
    for user in ["", "root", "0", "0:0", "root:tester"] {
        let refused = broker
            .spawn_as(broker.spawn_request(&["id", "-u"], user))
            .await
            .expect_err("root is refused");
        assert_eq!(
            refused.code(),
            Code::PermissionDenied,
            "{user:?}: {refused:?}"
        );
        assert!(refused.message().contains("root"), "{user:?}: {refused:?}");
    }
    // A user the container does not know cannot be told apart from root: refused too.
    let refused = broker
        .spawn_as(broker.spawn_request(&["id", "-u"], "nobody-here"))
        .await
        .expect_err("an unknown user is refused");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(sessions(&broker).await?.is_empty(), "no session was made");

    // Anyone else runs, by name or by number.
    for user in ["tester", "1000"] {
        let session = broker
            .spawn_as(broker.spawn_request(&["sleep", "60"], user))
            .await
            .unwrap_or_else(|status| panic!("{user:?}: {status:?}"));
        broker.kill(&session.session_id).await?;
    }
    broker.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_root_opts_out_of_the_root_rule() -> anyhow::Result<()> {
    let Some(broker) = docker_broker(Box::new(|config| config.policy.allow_root = true)).await?
    else {
        return Ok(());
    };
    let session = broker
        .spawn_as(broker.spawn_request(&["sleep", "60"], ""))
        .await?;
    broker.kill(&session.session_id).await?;
    broker.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_containers_admits_by_name_or_label_and_refuses_the_rest() -> anyhow::Result<()> {
    for (rules, admitted) in [
        // The fixture is `ptyhub-test-<uuid>` with the label `ptyhub.test=1`.
        (&["name:ptyhub-test-*"][..], true),
        (&["label:ptyhub.test"], true),
        (&["prod-*", "label:ptyhub.test=1"], true),
        (&["prod-*"], false),
        (&["label:ptyhub.test=0"], false),
    ] {
        let parsed: Vec<_> = rules.iter().map(|rule| rule.parse().unwrap()).collect();
        let Some(broker) = docker_broker(Box::new(move |config| {
            config.policy.allowed_containers = parsed
        }))
        .await?
        else {
            return Ok(());
        };
        let answer = broker
            .spawn_as(broker.spawn_request(&["sleep", "60"], "tester"))
            .await;
        match (admitted, answer) {
            (true, Ok(session)) => {
                broker.kill(&session.session_id).await?;
            }
            (false, Err(refused)) => {
                assert_eq!(
                    refused.code(),
                    Code::PermissionDenied,
                    "{rules:?}: {refused:?}"
                );
                assert!(
                    refused.message().contains("--allow-containers"),
                    "{rules:?}: {refused:?}"
                );
                assert!(sessions(&broker).await?.is_empty());
            }
            (admitted, answer) => panic!("{rules:?}: admitted {admitted}, got {answer:?}"),
        }
        broker.stop().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_user_refuses_the_brokers_own_user_for_local_sessions() -> anyhow::Result<()> {
    let own = nix::unistd::User::from_uid(nix::unistd::getuid())?
        .expect("the test's user has a passwd entry")
        .name;
    let denied = own.clone();
    let broker = TestBroker::start_with(
        Backend::Local,
        Box::new(move |config| config.policy.denied_users = vec![denied]),
    )
    .await?;
    for user in ["", own.as_str()] {
        let refused = broker
            .spawn_as(broker.spawn_request(&["true"], user))
            .await
            .expect_err("the denied user is refused");
        assert_eq!(
            refused.code(),
            Code::PermissionDenied,
            "{user:?}: {refused:?}"
        );
        assert!(refused.message().contains("--deny-user"), "{refused:?}");
    }
    assert!(sessions(&broker).await?.is_empty());
    broker.stop().await?;

    // Without the rule, local sessions run as the broker's user, root included: the root rule
    // is for containers.
    let broker = TestBroker::start(Backend::Local).await?;
    let session = broker
        .spawn_as(broker.spawn_request(&["sleep", "60"], ""))
        .await?;
    broker.kill(&session.session_id).await?;
    broker.stop().await
}
