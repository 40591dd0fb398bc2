//! Share links on both databases: made with a token that is stored only as its hash, found by
//! token or id while live, listed, revoked, bounded per instance, ended with their instance.

use std::time::Duration;

use session_api::Error;
use session_api::domain::NewShare;
use session_api::shares::{SHARE_TOKEN_PREFIX, ShareService};
use session_api::store::Store;

use crate::store::new_instance;
use crate::support::{Backend, FreshDatabase};

async fn shares(backend: Backend) -> Option<(FreshDatabase, Store, ShareService)> {
    let database = FreshDatabase::create(backend).await?;
    let store = Store::connect(database.url()).await.expect("connect");
    store.migrate().await.expect("migrate");
    let service = ShareService::new(store.clone());
    Some((database, store, service))
}

/// A share of `instance` by alice, of the whole instance and without history.
fn grant(instance: &str, ttl: Duration) -> NewShare {
    NewShare {
        instance: instance.to_owned(),
        session_id: None,
        ttl,
        created_by: "alice".to_owned(),
        history: false,
    }
}

both_databases!(
    a_share_is_found_by_its_token_until_it_is_revoked,
    |backend| async move {
        let Some((_database, store, shares)) = shares(backend).await else {
            return;
        };
        let instance = store
            .insert_instance(&new_instance("shared", 3), "local")
            .await
            .unwrap();
        let (share, token) = shares
            .create(&grant("shared", Duration::from_secs(3600)))
            .await
            .unwrap();
        assert!(
            token.starts_with(SHARE_TOKEN_PREFIX) && token.len() > 64,
            "{token}"
        );
        assert_eq!(share.instance_id, instance.id);
        assert_eq!(share.session_id, None);
        assert_eq!(share.created_by, "alice");
        assert!(!share.history, "a share sees only the present unless asked");
        assert_eq!(shares.find_by_token(&token).await.unwrap(), share);
        assert_eq!(shares.find_by_id(share.id).await.unwrap(), share);
        // A token one character off is not found, nor is the hash-less prefix alone.
        let mut other = token.clone();
        other.pop();
        other.push('x');
        for wrong in [other.as_str(), SHARE_TOKEN_PREFIX, ""] {
            assert!(matches!(
                shares.find_by_token(wrong).await,
                Err(Error::ShareNotFound)
            ));
        }
        assert_eq!(
            shares.list("shared", false).await.unwrap(),
            std::slice::from_ref(&share)
        );

        let (revoked, ended) = shares
            .revoke(&instance.id.to_string(), share.id)
            .await
            .unwrap();
        assert!(ended);
        assert!(revoked.revoked_at.is_some());
        assert!(matches!(
            shares.find_by_token(&token).await,
            Err(Error::ShareNotFound)
        ));
        assert_eq!(shares.list("shared", false).await.unwrap(), []);
        assert_eq!(
            shares.list("shared", true).await.unwrap(),
            std::slice::from_ref(&revoked)
        );
        // Revoking again answers the share as it was revoked.
        assert_eq!(
            shares.revoke("shared", share.id).await.unwrap(),
            (revoked, false)
        );
    }
);

both_databases!(
    shares_are_checked_bounded_and_end_with_their_instance,
    |backend| async move {
        let Some((_database, store, shares)) = shares(backend).await else {
            return;
        };
        let instance = store
            .insert_instance(&new_instance("bounded", 3), "local")
            .await
            .unwrap();
        store
            .insert_instance(&new_instance("another", 3), "local")
            .await
            .unwrap();
        for ttl in [Duration::from_secs(59), Duration::from_secs(31 * 24 * 3600)] {
            assert!(matches!(
                shares.create(&grant("bounded", ttl)).await,
                Err(Error::InvalidRequest(_))
            ));
        }
        assert!(matches!(
            shares
                .create(&NewShare {
                    session_id: Some(uuid::Uuid::new_v4()),
                    ..grant("bounded", Duration::from_secs(60))
                })
                .await,
            Err(Error::SessionNotFound(_))
        ));
        let (share, token) = shares
            .create(&grant("bounded", Duration::from_secs(60)))
            .await
            .unwrap();
        // Another instance's share is not this instance's to revoke.
        assert!(matches!(
            shares.revoke("another", share.id).await,
            Err(Error::ShareNotFound)
        ));
        for _ in 1..ptyhub_wire::limits::MAX_SHARES_PER_INSTANCE {
            shares
                .create(&grant("bounded", Duration::from_secs(60)))
                .await
                .unwrap();
        }
        assert!(matches!(
            shares
                .create(&grant("bounded", Duration::from_secs(60)))
                .await,
            Err(Error::TooManyShares(_))
        ));
        store.delete_instance(instance.id).await.unwrap();
        assert!(matches!(
            shares.find_by_token(&token).await,
            Err(Error::ShareNotFound)
        ));
    }
);

both_databases!(
    a_share_keeps_whether_its_creator_let_it_see_history,
    |backend| async move {
        let Some((_database, store, shares)) = shares(backend).await else {
            return;
        };
        store
            .insert_instance(&new_instance("remembered", 3), "local")
            .await
            .unwrap();
        let (with_history, token) = shares
            .create(&NewShare {
                history: true,
                ..grant("remembered", Duration::from_secs(3600))
            })
            .await
            .unwrap();
        let (present_only, _) = shares
            .create(&grant("remembered", Duration::from_secs(3600)))
            .await
            .unwrap();
        assert!(with_history.history);
        assert!(!present_only.history);
        // As stored: found again by token, by id and in the list.
        assert!(shares.find_by_token(&token).await.unwrap().history);
        assert!(!shares.find_by_id(present_only.id).await.unwrap().history);
        let mut listed = shares.list("remembered", false).await.unwrap();
        listed.sort_by_key(|share| share.history);
        assert_eq!(listed, [present_only, with_history]);
    }
);
